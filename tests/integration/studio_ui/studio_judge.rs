//! The studio's judge verdicts in Chromium (tests/studio/judge.test.mjs):
//! the Eval page with criteria and a judge role, and the run page's
//! *Judged* card, against `stategraph serve` on a model script that also
//! answers as the judge.

use std::time::Duration;

use crate::support::browser::{artifacts, browser};
use crate::support::process::serve_binary_with;

/// The Eval page with a judge (tests/studio/judge.test.mjs): a server whose
/// model script also answers as a judge; the page shows each turn's
/// verdicts and reasons beside its answers, and the run page the verdicts
/// the evaluation stored with the run.
#[tokio::test]
async fn studio_eval_judges_and_the_run_page_shows_the_verdicts() {
    let b = browser();
    let dir = crate::support::process::workdir();
    let d = dir.path();
    let models = std::fs::read_to_string(d.join("models.yaml")).unwrap();
    let judge = "rules:\n  - when: { format: judge_verdict, user: \"polite\" }\n    reply: { json: { verdict: pass, reason: \"It greets the user.\" } }\n  - when: { format: judge_verdict, user: \"cites a source\" }\n    reply: { json: { verdict: fail, reason: \"No source is named.\" } }\n";
    std::fs::write(d.join("models.yaml"), models.replacen("rules:\n", judge, 1)).unwrap();
    let script = d.join("models.yaml");
    let (mut server, base) = serve_binary_with(
        d,
        &d.join("graphs"),
        &["--model-script", script.to_str().unwrap()],
    )
    .await;
    let art = artifacts().join("judge");
    let (ok, report) = b
        .run(
            "judge.test.mjs",
            &[
                ("STUDIO_URL", base.as_ref()),
                ("STUDIO_ARTIFACTS", art.as_os_str()),
            ],
            Duration::from_secs(300),
        )
        .await;
    let _ = server.kill().await;
    assert!(ok, "the judge browser test failed:\n{report}");
    assert!(art.join("run-verdicts.png").is_file());
}
