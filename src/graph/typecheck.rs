//! Check-time types of templates and expressions: an attribute read that
//! the declared types say is not there (`doc.contnet`, `result.content` of
//! a `web_search` result, which has `snippet`) is a diagnostic, not text
//! that renders empty or a run that fails halfway.
//!
//! The check walks minijinja's syntax tree (its `unstable_machinery` API,
//! pinned to one minijinja version in Cargo.toml) with the type of every
//! name it can know: state fields from the declared state, names a setting
//! provides with a declared type (`result` of a tool with an output schema,
//! `state`, `user`, `config`), loop variables (an item of the list they
//! loop over) and `set`/`with` names. What it cannot know (filter results
//! other than a few, `Any`, an object with no declared properties) is not
//! checked: the check reports only what is certainly wrong by the types.
//!
//! Reading an undeclared attribute is wrong when the object declares its
//! properties. For an open object (`additionalProperties` not `false`), an
//! explicit guard — `x.y is defined`, `x.y | default(…)` — still may read
//! one: the file says it knows the value may be missing. Top-level names
//! are not checked here (the variable checks of prompts and expressions
//! report them).

use std::collections::HashMap;

use minijinja::machinery::{self, ast};

use super::diagnostic::did_you_mean;
use crate::state::{StateSchema, TypeKind, TypeSpec};

/// What names mean in one template or expression.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TypeScope<'a> {
    /// State fields by name (top-level variables of prompts and settings).
    pub(crate) schema: Option<&'a StateSchema>,
    /// Other names with a declared type; they hide state fields of the
    /// same name.
    pub(crate) typed: &'a [(&'a str, TypeSpec)],
}

/// An attribute read the types say is not there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AttrProblem {
    /// Line in the template or expression, from 1.
    pub(crate) line: u32,
    /// Column (characters), from 1.
    pub(crate) column: u32,
    /// What is wrong.
    pub(crate) message: String,
    /// What to write instead.
    pub(crate) hint: Option<String>,
}

/// Checks a template's attribute reads. A template that does not parse
/// gives no problems (its syntax error is reported elsewhere).
pub(crate) fn check_template(source: &str, scope: TypeScope<'_>) -> Vec<AttrProblem> {
    let Ok(tree) = machinery::parse(source, "<template>", Default::default()) else {
        return Vec::new();
    };
    let mut w = Walker::new(source, scope);
    w.stmt(&tree);
    w.problems
}

/// Checks an expression's attribute reads.
pub(crate) fn check_expression(source: &str, scope: TypeScope<'_>) -> Vec<AttrProblem> {
    let Ok(expr) = machinery::parse_expr(source) else {
        return Vec::new();
    };
    let mut w = Walker::new(source, scope);
    w.expr(&expr);
    w.problems
}

/// The type of an expression's value, when the declared types say (a map
/// `over` expression: its items are the map target's `item`).
pub(crate) fn expression_type(source: &str, scope: TypeScope<'_>) -> Option<TypeSpec> {
    let expr = machinery::parse_expr(source).ok()?;
    Walker::new(source, scope).expr(&expr)
}

/// The type of the state as one object (`state.x` in bound arguments).
pub(crate) fn state_type(schema: &StateSchema) -> TypeSpec {
    TypeSpec::of(TypeKind::Object {
        properties: schema
            .fields
            .iter()
            .map(|f| (f.name.to_string(), f.ty.clone()))
            .collect(),
        required: Vec::new(),
        additional: false,
    })
}

/// The type of a constant value, closed: `config.NAME` may read only the
/// names the graph's `config:` has (an object with none has no attributes
/// at all).
pub(crate) fn value_type(v: &serde_json::Value) -> TypeSpec {
    use serde_json::Value;
    match v {
        Value::Null => TypeSpec::any(),
        Value::Bool(_) => TypeSpec::boolean(),
        Value::Number(n) if n.is_i64() || n.is_u64() => TypeSpec::integer(),
        Value::Number(_) => TypeSpec::number(),
        Value::String(_) => TypeSpec::string(),
        Value::Array(items) => {
            TypeSpec::array(items.first().map_or_else(TypeSpec::any, value_type))
        }
        Value::Object(map) => TypeSpec::of(TypeKind::Object {
            properties: map
                .iter()
                .map(|(k, v)| (k.clone(), value_type(v)))
                .collect(),
            required: map.keys().cloned().collect(),
            additional: false,
        }),
    }
}

/// A known type, or nothing known.
type Ty = Option<TypeSpec>;

struct Walker<'s> {
    source: &'s str,
    scope: TypeScope<'s>,
    /// Names the template binds (loop variables, `set`), innermost last.
    locals: Vec<HashMap<String, Ty>>,
    problems: Vec<AttrProblem>,
    /// Inside `is defined` / `default(…)`: an open object's missing
    /// attribute is asked for on purpose.
    guarded: bool,
    /// Attribute reads (as written) an enclosing `if` tests: inside its
    /// body they are guarded too (`{% if x.y %}{{ x.y }}{% endif %}`).
    guards: Vec<String>,
}

impl<'s> Walker<'s> {
    fn new(source: &'s str, scope: TypeScope<'s>) -> Self {
        Self {
            source,
            scope,
            locals: vec![HashMap::new()],
            problems: Vec::new(),
            guarded: false,
            guards: Vec::new(),
        }
    }

    fn bind(&mut self, target: &ast::Expr<'_>, ty: Ty) {
        let Some(top) = self.locals.last_mut() else {
            return;
        };
        match target {
            ast::Expr::Var(v) => {
                top.insert(v.id.to_owned(), ty);
            }
            ast::Expr::Tuple(t) => {
                for item in &t.items {
                    if let ast::Expr::Var(v) = item {
                        top.insert(v.id.to_owned(), None);
                    }
                }
            }
            _ => {}
        }
    }

    fn lookup(&self, name: &str) -> Ty {
        for frame in self.locals.iter().rev() {
            if let Some(t) = frame.get(name) {
                return t.clone();
            }
        }
        if let Some((_, t)) = self.scope.typed.iter().find(|(n, _)| *n == name) {
            return Some(t.clone());
        }
        let schema = self.scope.schema?;
        schema
            .fields
            .iter()
            .find(|f| &*f.name == name)
            .map(|f| f.ty.clone())
    }

    fn body(&mut self, stmts: &[ast::Stmt<'_>]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    /// Runs `f` in a new frame of local names.
    fn nested(&mut self, f: impl FnOnce(&mut Self)) {
        self.locals.push(HashMap::new());
        f(self);
        self.locals.pop();
    }

    fn stmt(&mut self, s: &ast::Stmt<'_>) {
        match s {
            ast::Stmt::Template(t) => self.body(&t.children),
            ast::Stmt::EmitExpr(e) => {
                self.expr(&e.expr);
            }
            ast::Stmt::EmitRaw(_) => {}
            ast::Stmt::ForLoop(f) => self.for_loop(f),
            ast::Stmt::IfCond(c) => {
                let n = self.condition(&c.expr);
                self.body(&c.true_body);
                self.guards.truncate(self.guards.len() - n);
                self.body(&c.false_body);
            }
            ast::Stmt::WithBlock(w) => {
                let tys: Vec<Ty> = w.assignments.iter().map(|(_, e)| self.expr(e)).collect();
                self.nested(|me| {
                    for ((target, _), ty) in w.assignments.iter().zip(tys) {
                        me.bind(target, ty);
                    }
                    me.body(&w.body);
                });
            }
            ast::Stmt::Set(set) => {
                let ty = self.expr(&set.expr);
                self.bind(&set.target, ty);
            }
            ast::Stmt::SetBlock(set) => {
                self.body(&set.body);
                self.bind(&set.target, None);
            }
            ast::Stmt::AutoEscape(a) => self.body(&a.body),
            ast::Stmt::FilterBlock(f) => self.body(&f.body),
            ast::Stmt::Block(b) => self.body(&b.body),
            ast::Stmt::Do(d) => self.call_args(&d.call.args),
            ast::Stmt::Import(i) => self.bind(&i.name, None),
            ast::Stmt::FromImport(i) => {
                for (name, alias) in &i.names {
                    self.bind(alias.as_ref().unwrap_or(name), None);
                }
            }
            ast::Stmt::Extends(_) | ast::Stmt::Include(_) => {}
        }
    }

    fn for_loop(&mut self, f: &ast::ForLoop<'_>) {
        let item = self.expr(&f.iter).and_then(|t| item_type(&t));
        self.nested(|me| {
            me.bind(&f.target, item);
            if let Some(r) = me.locals.last_mut() {
                r.insert("loop".into(), None);
            }
            if let Some(filter) = &f.filter_expr {
                me.expr(filter);
            }
            me.body(&f.body);
        });
        self.body(&f.else_body);
    }

    fn call_args(&mut self, args: &[ast::CallArg<'_>]) {
        for a in args {
            match a {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => {
                    self.expr(e);
                }
            }
        }
    }

    /// Walks an expression; its type when known.
    fn expr(&mut self, e: &ast::Expr<'_>) -> Ty {
        match e {
            ast::Expr::Var(v) => self.lookup(v.id),
            ast::Expr::Const(_) => None,
            ast::Expr::Slice(s) => {
                let t = self.expr(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(part);
                }
                t
            }
            ast::Expr::UnaryOp(u) => {
                self.expr(&u.expr);
                None
            }
            ast::Expr::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
                None
            }
            ast::Expr::Compare(c) => {
                self.expr(&c.expr);
                for op in &c.ops {
                    self.expr(&op.expr);
                }
                None
            }
            ast::Expr::IfExpr(i) => {
                let n = self.condition(&i.test_expr);
                let t = self.expr(&i.true_expr);
                self.guards.truncate(self.guards.len() - n);
                let f = i.false_expr.as_ref().map(|f| self.expr(f));
                // The type is known when both branches agree.
                match f {
                    Some(f) if f != t => None,
                    _ => t,
                }
            }
            ast::Expr::Filter(f) => self.filter(f),
            ast::Expr::Test(t) => {
                let guard = matches!(t.name, "defined" | "undefined");
                let was = self.guarded;
                self.guarded = was || guard;
                self.expr(&t.expr);
                self.guarded = was;
                self.call_args(&t.args);
                None
            }
            ast::Expr::GetAttr(g) => {
                let base = self.expr(&g.expr)?;
                self.attribute(&base, &g.expr, g.name, e.span())
            }
            ast::Expr::GetItem(g) => {
                let base = self.expr(&g.expr);
                self.expr(&g.subscript_expr);
                let base = base?;
                match &g.subscript_expr {
                    ast::Expr::Const(c) => match c.value.as_str() {
                        Some(name) => self.attribute(&base, &g.expr, name, e.span()),
                        None => item_type(&base),
                    },
                    _ => item_type(&base),
                }
            }
            ast::Expr::Call(c) => {
                // A method call (`x.items()`) is not an attribute read.
                match &c.expr {
                    ast::Expr::GetAttr(g) => {
                        self.expr(&g.expr);
                    }
                    other => {
                        self.expr(other);
                    }
                }
                self.call_args(&c.args);
                None
            }
            ast::Expr::List(l) => {
                for i in &l.items {
                    self.expr(i);
                }
                None
            }
            ast::Expr::Tuple(t) => {
                for i in &t.items {
                    self.expr(i);
                }
                None
            }
            ast::Expr::Map(m) => {
                for (k, v) in m.keys.iter().zip(&m.values) {
                    self.expr(k);
                    self.expr(v);
                }
                None
            }
        }
    }

    /// Walks an `if` condition: it may ask for what an open object may
    /// not have (`{% if x.y %}`, `x.y is defined`), and the reads it tests
    /// are guarded in the body. Returns how many guards it added.
    fn condition(&mut self, e: &ast::Expr<'_>) -> usize {
        let was = self.guarded;
        self.guarded = true;
        self.expr(e);
        self.guarded = was;
        let mut paths = Vec::new();
        attr_paths(e, &mut paths);
        let n = paths.len();
        for p in paths {
            self.guards.push(self.text(p).to_owned());
        }
        n
    }

    /// A filter: its input and arguments walked; the attribute names
    /// `map(attribute=…)`, `selectattr`, `rejectattr`, `sort(attribute=…)`
    /// and `groupby` read checked against the items; the type of what a
    /// few filters return.
    fn filter(&mut self, f: &ast::Filter<'_>) -> Ty {
        let guard = matches!(f.name, "default" | "d");
        let was = self.guarded;
        self.guarded = was || guard;
        let input = f.expr.as_ref().and_then(|e| self.expr(e));
        self.guarded = was;
        self.call_args(&f.args);
        let input = input?;
        let item = item_type(&input);
        if let (Some(item), Some(base)) = (&item, &f.expr) {
            for (name, span) in attribute_args(f) {
                let shown = format!("an item of `{}`", self.text(base.span()));
                self.attribute_named(item, &shown, name, span);
            }
        }
        match f.name {
            "default" | "d" => Some(TypeSpec {
                nullable: false,
                ..input
            }),
            "first" | "last" => item,
            "sort" | "unique" | "reverse" | "list" | "selectattr" | "rejectattr" | "select"
            | "reject" | "batch" => (input.is_list()).then_some(input),
            "map" => {
                let attr = f.args.iter().find_map(|a| match a {
                    ast::CallArg::Kwarg("attribute", ast::Expr::Const(c)) => {
                        c.value.as_str().map(str::to_owned)
                    }
                    _ => None,
                })?;
                let item = item?;
                property(&item, &attr).map(TypeSpec::array)
            }
            _ => None,
        }
    }

    fn text(&self, span: machinery::Span) -> &'s str {
        let (a, b) = (span.start_offset as usize, span.end_offset as usize);
        self.source.get(a..b).unwrap_or("?")
    }

    /// `base.name` read at `span`; the attribute's type when known.
    fn attribute(
        &mut self,
        ty: &TypeSpec,
        base: &ast::Expr<'_>,
        name: &str,
        span: machinery::Span,
    ) -> Ty {
        let shown = self.text(base.span()).to_owned();
        let tested = self.guards.iter().any(|g| g == self.text(span));
        let was = self.guarded;
        self.guarded = was || tested;
        let t = self.attribute_named(ty, &format!("`{shown}`"), name, span);
        self.guarded = was;
        t
    }

    fn attribute_named(
        &mut self,
        ty: &TypeSpec,
        shown: &str,
        name: &str,
        span: machinery::Span,
    ) -> Ty {
        let problem = match &ty.kind {
            TypeKind::Object {
                properties,
                additional,
                ..
            } => {
                if let Some((_, t)) = properties.iter().find(|(n, _)| n == name) {
                    return Some(t.clone());
                }
                if *additional && (properties.is_empty() || self.guarded) {
                    return None;
                }
                let names: Vec<&str> = properties.iter().map(|(n, _)| n.as_str()).collect();
                let hint = did_you_mean(name, names.iter().copied()).or_else(|| {
                    (!names.is_empty()).then(|| format!(
                        "{shown} has {}",
                        names
                            .iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                });
                (
                    format!("{shown} has no attribute `{name}` (by its declared type)"),
                    hint,
                )
            }
            TypeKind::Array { .. } | TypeKind::Messages => (
                format!("{shown} is a list; it has no attribute `{name}`"),
                Some("loop over it (`{% for x in … %}`), index it (`[0]`) or use a filter (`| map(attribute='…')`)".into()),
            ),
            TypeKind::String { .. }
            | TypeKind::Integer { .. }
            | TypeKind::Number { .. }
            | TypeKind::Boolean => (
                format!(
                    "{shown} is a {}; it has no attribute `{name}`",
                    kind_name(&ty.kind)
                ),
                None,
            ),
            TypeKind::Any => return None,
        };
        self.problems.push(AttrProblem {
            line: u32::from(span.start_line).max(1),
            column: u32::from(span.start_col) + 1,
            message: problem.0,
            hint: problem.1,
        });
        None
    }
}

/// Where the attribute reads of a condition are written.
fn attr_paths(e: &ast::Expr<'_>, out: &mut Vec<machinery::Span>) {
    match e {
        ast::Expr::GetAttr(g) => {
            out.push(e.span());
            attr_paths(&g.expr, out);
        }
        ast::Expr::GetItem(g) => {
            out.push(e.span());
            attr_paths(&g.expr, out);
        }
        ast::Expr::Test(t) => attr_paths(&t.expr, out),
        ast::Expr::Filter(f) => {
            if let Some(x) = &f.expr {
                attr_paths(x, out);
            }
        }
        ast::Expr::UnaryOp(u) => attr_paths(&u.expr, out),
        ast::Expr::BinOp(b) => {
            attr_paths(&b.left, out);
            attr_paths(&b.right, out);
        }
        ast::Expr::Compare(c) => {
            attr_paths(&c.expr, out);
            for op in &c.ops {
                attr_paths(&op.expr, out);
            }
        }
        _ => {}
    }
}

/// Attribute names a filter reads from each item, with where they are
/// written.
fn attribute_args<'a>(f: &'a ast::Filter<'a>) -> Vec<(&'a str, machinery::Span)> {
    let named = |e: &'a ast::Expr<'a>| match e {
        ast::Expr::Const(c) => c.value.as_str().map(|s| (s, e.span())),
        _ => None,
    };
    let mut out = Vec::new();
    for (i, a) in f.args.iter().enumerate() {
        let found = match (f.name, a) {
            (
                "map" | "sort" | "groupby" | "sum" | "unique",
                ast::CallArg::Kwarg("attribute", e),
            ) => named(e),
            ("selectattr" | "rejectattr" | "groupby", ast::CallArg::Pos(e)) if i == 0 => named(e),
            _ => None,
        };
        // A dotted path (`sort(attribute='a.b')`) is left alone.
        if let Some((name, span)) = found.filter(|(n, _)| !n.contains('.')) {
            out.push((name, span));
        }
    }
    out
}

/// The type of one item of a list.
fn item_type(ty: &TypeSpec) -> Ty {
    match &ty.kind {
        TypeKind::Array { .. } | TypeKind::Messages => ty.item_type(),
        _ => None,
    }
}

/// A declared property's type.
fn property(ty: &TypeSpec, name: &str) -> Ty {
    match &ty.kind {
        TypeKind::Object { properties, .. } => properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone()),
        _ => None,
    }
}

fn kind_name(kind: &TypeKind) -> &'static str {
    match kind {
        TypeKind::String { .. } => "string",
        TypeKind::Integer { .. } => "integer",
        TypeKind::Number { .. } => "number",
        TypeKind::Boolean => "boolean",
        _ => "value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::FieldSpec;
    use serde_json::json;

    fn schema() -> StateSchema {
        let doc = TypeSpec::from_json_schema(&json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "content": {"type": "string"}},
            "additionalProperties": false
        }))
        .unwrap();
        let open = TypeSpec::from_json_schema(&json!({
            "type": "object", "properties": {"score": {"type": "number"}}
        }))
        .unwrap();
        StateSchema::new(
            "s",
            vec![
                FieldSpec::new("docs", TypeSpec::array(doc)),
                FieldSpec::new("grade", open),
                FieldSpec::new("query", TypeSpec::string()),
                FieldSpec::new("messages", TypeSpec::messages()),
                FieldSpec::new("anything", TypeSpec::any()),
            ],
        )
    }

    fn problems(src: &str) -> Vec<(u32, u32, String)> {
        let s = schema();
        let scope = TypeScope {
            schema: Some(&s),
            typed: &[],
        };
        check_template(src, scope)
            .into_iter()
            .map(|p| {
                (
                    p.line,
                    p.column,
                    p.message + " / " + &p.hint.unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn loop_items_and_attributes_are_typed() {
        let found = problems(
            "Q: {{ query }}\n{% for d in docs %}\n  {{ d.title }}: {{ d.contnet }}\n{% endfor %}",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].0, found[0].1), (3, 21));
        assert!(
            found[0].2.contains("`d` has no attribute `contnet`"),
            "{found:?}"
        );
        assert!(found[0].2.contains("did you mean `content`?"), "{found:?}");
    }

    #[test]
    fn what_is_right_or_unknown_passes() {
        let ok = [
            "{{ docs[0].title }} {{ docs | map(attribute='content') | join(' ') }}",
            "{% for m in messages %}{{ m.role }} {{ m.content }}{% for c in m.tool_calls %}{{ c.name }}{% endfor %}{% endfor %}",
            "{{ anything.whatever.deeper }} {{ grade.score }} {{ loop_free }}",
            "{% if grade.extra is defined %}{{ grade.extra | default('') }}{% endif %}",
            "{% if grade.extra %}{{ grade.extra }}{% else %}none{% endif %}",
            "{{ grade.note if grade.note is defined else '' }}",
            "{% set first = docs | first %}{{ first.title }}",
            "{% for k, v in grade | items %}{{ k }}{{ v }}{% endfor %}",
        ];
        for src in ok {
            assert_eq!(problems(src), [], "{src}");
        }
    }

    #[test]
    fn each_kind_of_wrong_read_is_found() {
        let cases = [
            ("{{ grade.scroe }}", "did you mean `score`?"),
            ("{{ docs.title }}", "`docs` is a list"),
            ("{{ query.text }}", "`query` is a string"),
            (
                "{{ docs | map(attribute='body') | join }}",
                "an item of `docs` has no attribute `body`",
            ),
            (
                "{% set first = docs | first %}{{ first.url }}",
                "`first` has `content`, `title`",
            ),
            ("{{ docs[0]['url'] }}", "`docs[0]` has no attribute `url`"),
            (
                "{% for m in messages %}{{ m.text }}{% endfor %}",
                "`m` has no attribute `text`",
            ),
            (
                "{{ (docs | first).body | default('') }}",
                "no attribute `body`",
            ),
            (
                "{% if grade.extra %}{% endif %}{{ grade.extra }}",
                "`grade` has no attribute `extra`",
            ),
        ];
        for (src, want) in cases {
            let found = problems(src);
            assert_eq!(found.len(), 1, "{src}: {found:?}");
            assert!(found[0].2.contains(want), "{src}: {found:?}");
        }
        // A test guards an open object's read, never a closed one's.
        let found = problems("{% if docs[0].body %}{{ docs[0].body }}{% endif %}");
        assert_eq!(found.len(), 2, "{found:?}");
    }

    #[test]
    fn typed_names_hide_fields_and_expressions_are_checked() {
        let s = schema();
        let result = TypeSpec::from_json_schema(&json!({
            "type": "object",
            "properties": {"results": {"type": "array", "items": {"type": "object",
                "properties": {"title": {}, "url": {}, "snippet": {}}, "additionalProperties": false}}},
            "additionalProperties": false
        }))
        .unwrap();
        let typed = [("result", result), ("state", state_type(&s))];
        let scope = TypeScope {
            schema: Some(&s),
            typed: &typed,
        };
        let p = check_expression(
            "result.results | map(attribute='content') | join('\\n')",
            scope,
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].hint.as_deref().unwrap().contains("`snippet`"), "{p:?}");
        assert_eq!(
            check_expression("state.query ~ state.qeury", scope).len(),
            1
        );
        assert_eq!(check_expression("state.query", scope), []);
    }
}
