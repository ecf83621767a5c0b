//! The studio: the browser front end in `studio/`, embedded in the binary
//! (`include_str!`, no build step, no CDN) and served at `/studio`.
//!
//! `GET /studio` and `/studio/` answer `index.html`, `/studio/<file>` one of
//! the files below, and `/` redirects to `/studio` (the server has no other
//! root page). Every response carries an `ETag` (a hash of the file) with
//! `Cache-Control: no-cache`, so a browser revalidates and a new binary's
//! files are picked up at once, while an unchanged file costs a 304.
//!
//! The files carry no data and need no key: they are public, like the code
//! of any open-source front end. Everything the studio shows comes from
//! `/api/…`, which checks the caller as it does for any client. Asking for a
//! key on the page itself would leave a browser no way in when API keys are
//! configured (a navigation cannot send `Authorization`); instead the page
//! loads, its first API call gets a 401, and it asks for the key (see
//! `studio/api.js`).
//!
//! A client that accepts gzip gets each file gzipped (about a quarter of
//! its size), compressed once per process on first use and kept: the files
//! never change while it runs, so nothing is compressed per request.

use std::io::Write as _;
use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::error::ApiError;

/// `(file name, content type, content)` of every file served.
const FILES: [(&str, &str, &str); 25] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("studio/index.html"),
    ),
    (
        "studio.css",
        "text/css; charset=utf-8",
        include_str!("studio/studio.css"),
    ),
    ("app.js", JS, include_str!("studio/app.js")),
    ("api.js", JS, include_str!("studio/api.js")),
    ("util.js", JS, include_str!("studio/util.js")),
    ("graph.js", JS, include_str!("studio/graph.js")),
    ("graphs.js", JS, include_str!("studio/graphs.js")),
    ("uistream.js", JS, include_str!("studio/uistream.js")),
    ("playground.js", JS, include_str!("studio/playground.js")),
    ("runs.js", JS, include_str!("studio/runs.js")),
    ("run.js", JS, include_str!("studio/run.js")),
    ("timeline.js", JS, include_str!("studio/timeline.js")),
    ("states.js", JS, include_str!("studio/states.js")),
    ("diff.js", JS, include_str!("studio/diff.js")),
    ("events.js", JS, include_str!("studio/events.js")),
    ("vlist.js", JS, include_str!("studio/vlist.js")),
    ("replay.js", JS, include_str!("studio/replay.js")),
    ("fork.js", JS, include_str!("studio/fork.js")),
    ("eval.js", JS, include_str!("studio/eval.js")),
    ("verdicts.js", JS, include_str!("studio/verdicts.js")),
    ("path.js", JS, include_str!("studio/path.js")),
    ("hitl.js", JS, include_str!("studio/hitl.js")),
    ("thread.js", JS, include_str!("studio/thread.js")),
    ("breakpoints.js", JS, include_str!("studio/breakpoints.js")),
    ("calls.js", JS, include_str!("studio/calls.js")),
];

/// Browsers refuse ES modules sent with any other type.
const JS: &str = "text/javascript; charset=utf-8";

/// The page may not be framed (clickjacking) nor load plugins; scripts,
/// styles and connections are otherwise unrestricted so that test tools can
/// inject their checkers.
const CSP: &str = "frame-ancestors 'none'; object-src 'none'; base-uri 'none'";

/// Quoted ETags, one per file of [`FILES`], computed once.
fn etags() -> &'static [String; FILES.len()] {
    static TAGS: OnceLock<[String; FILES.len()]> = OnceLock::new();
    TAGS.get_or_init(|| {
        FILES
            .map(|(_, _, body)| format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(body.as_bytes())))
    })
}

/// Each file of [`FILES`] gzipped, computed once (`None` if it would not
/// be smaller).
fn gzipped() -> &'static [Option<Vec<u8>>; FILES.len()] {
    static GZ: OnceLock<[Option<Vec<u8>>; FILES.len()]> = OnceLock::new();
    GZ.get_or_init(|| {
        FILES.map(|(_, _, body)| {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            enc.write_all(body.as_bytes()).ok()?;
            enc.finish().ok().filter(|gz| gz.len() < body.len())
        })
    })
}

/// Whether `Accept-Encoding` allows gzip (`gzip` or `*`, not at `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// `GET /`: the studio is the server's home page.
pub(super) async fn root() -> Redirect {
    Redirect::temporary("/studio")
}

/// `GET /studio` and `GET /studio/`: the shell.
pub(super) async fn index(headers: HeaderMap) -> Response {
    file(0, &headers)
}

/// `GET /studio/{file}`.
pub(super) async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match FILES.iter().position(|(n, _, _)| *n == name) {
        Some(i) => file(i, &headers),
        None => ApiError::not_found(format!("the studio has no file `{name}`")).into_response(),
    }
}

fn file(i: usize, headers: &HeaderMap) -> Response {
    let (_, content_type, body) = FILES[i];
    let gz = gzipped()[i].as_deref().filter(|_| accepts_gzip(headers));
    // The gzipped bytes are another representation: another validator.
    let tag = match gz {
        Some(_) => format!("{}-gz\"", etags()[i].trim_end_matches('"')),
        None => etags()[i].clone(),
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut resp = match (fresh, gz) {
        (true, _) => StatusCode::NOT_MODIFIED.into_response(),
        (false, Some(gz)) => {
            let mut r = gz.to_vec().into_response();
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            r
        }
        (false, None) => body.into_response(),
    };
    let h = resp.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_studio_imports_is_served() {
        let served: Vec<&str> = FILES.iter().map(|(n, _, _)| *n).collect();
        for (name, _, body) in FILES {
            for line in body.lines() {
                let Some(rest) = line.split(" from './").nth(1) else {
                    continue;
                };
                let Some(target) = rest.split('\'').next() else {
                    continue;
                };
                assert!(
                    served.contains(&target),
                    "{name} imports ./{target}, which is not served"
                );
            }
        }
        let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/server/studio"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".js") || n.ends_with(".css") || n.ends_with(".html"));
        for n in on_disk {
            assert!(served.contains(&n.as_str()), "{n} is not embedded");
        }
    }

    #[test]
    fn gzip_is_sent_only_to_clients_that_accept_it() {
        let accepts = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepts_gzip(&h)
        };
        assert!(accepts("gzip, deflate, br"));
        assert!(accepts("br;q=1.0, GZIP;q=0.5"));
        assert!(accepts("*"));
        assert!(!accepts("br"));
        assert!(!accepts("gzip;q=0"));
        assert!(!accepts("identity"));
        assert!(!accepts_gzip(&HeaderMap::new()));
        for (i, gz) in gzipped().iter().enumerate() {
            let gz = gz.as_ref().expect("every studio file compresses");
            let mut out = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out)
                .unwrap();
            assert_eq!(out, FILES[i].2, "{} round-trips", FILES[i].0);
        }
    }

    #[test]
    fn etags_differ_per_file() {
        let tags = etags();
        let mut sorted = tags.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), tags.len());
    }
}
