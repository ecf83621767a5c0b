//! Readable text from an HTML page, for a model to read.
//!
//! A model needs the words of a page, not its markup: this keeps the title
//! and the visible text, drops what is never content (scripts, styles,
//! navigation, embedded SVG, templates), turns block elements into line
//! breaks and collapses whitespace. It is a forgiving scanner rather than a
//! parser — pages in the wild are rarely well formed, and a missing closing
//! tag must not lose the rest of the page or fail the call.

/// Elements whose content is raw text (may contain `<`) and never shown.
const RAW_SKIPPED: &[&str] = &["script", "style", "textarea", "xmp"];

/// Elements whose content is markup that is not page content.
const SKIPPED: &[&str] = &[
    "nav", "noscript", "svg", "template", "iframe", "object", "canvas", "select",
];

/// Elements that break a line before and after.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
];

/// What a page says.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Extracted {
    /// The first `<title>`, whitespace collapsed.
    pub(crate) title: Option<String>,
    /// The visible text: one line per block, whitespace collapsed.
    pub(crate) text: String,
}

/// Extracts the title and visible text of an HTML document.
pub(crate) fn extract(html: &str) -> Extracted {
    let mut out = String::with_capacity(html.len() / 4);
    let mut title: Option<String> = None;
    let mut skip_depth = 0usize;
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            if skip_depth == 0 {
                push_text(&mut out, rest);
            }
            break;
        };
        if skip_depth == 0 {
            push_text(&mut out, &rest[..lt]);
        }
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(tag) = Tag::parse(rest) else {
            // A `<` that starts no tag is text.
            if skip_depth == 0 {
                out.push('<');
            }
            rest = &rest[1..];
            continue;
        };
        rest = &rest[tag.len..];
        let name = tag.name.as_str();
        if tag.closing {
            if SKIPPED.contains(&name) {
                skip_depth = skip_depth.saturating_sub(1);
            } else if BLOCKS.contains(&name) {
                out.push('\n');
            }
            continue;
        }
        if RAW_SKIPPED.contains(&name) || name == "title" {
            let end = find_closing(rest, name);
            if name == "title" && title.is_none() && skip_depth == 0 {
                let t = collapse(&decode_entities(&rest[..end]));
                if !t.is_empty() {
                    title = Some(t);
                }
            }
            rest = &rest[end..];
            rest = Tag::parse(rest).map_or("", |close| &rest[close.len..]);
        } else if SKIPPED.contains(&name) {
            if !tag.self_closing {
                skip_depth += 1;
            }
        } else if BLOCKS.contains(&name) {
            out.push('\n');
        }
    }
    let text = out
        .lines()
        .map(collapse)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Extracted { title, text }
}

/// Appends text, with entities decoded; line breaks in the source are
/// plain whitespace (only block elements break lines).
fn push_text(out: &mut String, raw: &str) {
    let decoded;
    let text = if raw.contains('&') {
        decoded = decode_entities(raw);
        decoded.as_str()
    } else {
        raw
    };
    out.extend(
        text.chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
    );
}

/// The offset of `</name` (case-insensitive) in `s`, or its length.
fn find_closing(s: &str, name: &str) -> usize {
    let bytes = s.as_bytes();
    let mut from = 0;
    while let Some(i) = s[from..].find("</") {
        let at = from + i;
        let start = at + 2;
        let end = start + name.len();
        if end <= bytes.len() && bytes[start..end].eq_ignore_ascii_case(name.as_bytes()) {
            let next = bytes.get(end).copied();
            if next.is_none_or(|c| c == b'>' || c.is_ascii_whitespace() || c == b'/') {
                return at;
            }
        }
        from = start;
    }
    s.len()
}

/// A tag at the start of the input.
struct Tag {
    /// Lowercase name (`!doctype` style declarations are named `!`).
    name: String,
    closing: bool,
    self_closing: bool,
    /// Bytes up to and including its `>`.
    len: usize,
}

impl Tag {
    /// Parses `<name ...>` or `</name>` at the start of `s`; `None` if `s`
    /// does not start a tag (so the `<` is text).
    fn parse(s: &str) -> Option<Tag> {
        let b = s.as_bytes();
        let mut i = 1;
        let closing = b.get(i) == Some(&b'/');
        if closing {
            i += 1;
        }
        let first = *b.get(i)?;
        if first == b'!' || first == b'?' {
            let len = s.find('>').map_or(s.len(), |e| e + 1);
            return Some(Tag {
                name: "!".into(),
                closing,
                self_closing: true,
                len,
            });
        }
        if !first.is_ascii_alphabetic() {
            return None;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'-' || b[i] == b':') {
            i += 1;
        }
        let name = s[start..i].to_ascii_lowercase();
        // Skip attributes, honouring quotes (a `>` inside a value is not the end).
        let mut quote: Option<u8> = None;
        while i < b.len() {
            match (quote, b[i]) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, c @ (b'"' | b'\'')) => quote = Some(c),
                (None, b'>') => break,
                _ => {}
            }
            i += 1;
        }
        let self_closing = i > 0 && b.get(i - 1) == Some(&b'/');
        Some(Tag {
            name,
            closing,
            self_closing,
            len: (i + 1).min(b.len()),
        })
    }
}

/// Collapses runs of whitespace to one space and trims.
pub(crate) fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Decodes the common named entities and numeric references.
fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest[1..]
            .find(|c: char| c == ';' || c == '&' || c.is_whitespace())
            .map(|e| e + 1);
        let decoded = match end {
            Some(e) if rest.as_bytes()[e] == b';' && e <= 12 => {
                entity(&rest[1..e]).map(|c| (c, e + 1))
            }
            _ => None,
        };
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code);
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "ndash" => '–',
        "mdash" => '—',
        "hellip" => '…',
        "copy" => '©',
        "reg" => '®',
        "euro" => '€',
        "laquo" => '«',
        "raquo" => '»',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_title_and_text_and_drops_scripts_styles_and_navigation() {
        let page = r#"<!DOCTYPE html><html><head><title> Quarterly
            report </title><style>body { color: red }</style>
            <script>if (a < b) { document.write("<p>hidden</p>") }</script></head>
            <body><nav><ul><li><a href="/">Home</a></li><nav>inner</nav><li>About</li></ul></nav>
            <h1>Revenue &amp; costs</h1><p>Revenue   grew
            by 5&nbsp;%.</p><!-- a <p>comment</p> --><p data-x="a>b">Costs fell.<br>Margins &#x2191; &#8593;</p>
            <svg><text>chart</text></svg><p>1 < 2 &unknown; &amp</p></body></html>"#;
        let e = extract(page);
        assert_eq!(e.title.as_deref(), Some("Quarterly report"));
        assert_eq!(
            e.text,
            "Revenue & costs\nRevenue grew by 5 %.\nCosts fell.\nMargins ↑ ↑\n1 < 2 &unknown; &amp"
        );
    }

    #[test]
    fn unclosed_elements_do_not_lose_or_break_anything() {
        assert_eq!(extract("<p>before<script>never closed").text, "before");
        assert_eq!(extract("<title>t").title.as_deref(), Some("t"));
        assert_eq!(extract("<p>a <").text, "a <");
        assert_eq!(extract("<div class=\"x").text, "");
        assert_eq!(extract("plain text, no tags").text, "plain text, no tags");
    }
}
