//! The Rust `ringenv tune` binary end to end: it tunes a built-in env on a tiny budget, writes
//! well-formed JSON, and rejects bad arguments with a message naming them.

use std::process::Command;

fn ringenv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ringenv"))
}

#[test]
fn tune_measures_each_worker_count_and_recommends_one() {
    let json = std::env::temp_dir().join(format!("ringenv-cli-tune-{}.json", std::process::id()));
    let out = ringenv()
        .args(["tune", "BlocksWorld-v0", "--num-envs", "4", "--workers", "1,2", "--seconds", "0.2", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("recommended:"), "{stdout}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["workers"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2]);
    for r in rows {
        assert!(r["steps_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["batch_latency_ms"]["p99"].as_f64().unwrap() >= r["batch_latency_ms"]["p50"].as_f64().unwrap());
        assert!(r["cpu"]["tree_cores"].as_f64().unwrap() > 0.0);
    }
    let pick = report["recommended"]["workers"].as_u64().unwrap();
    assert!(pick == 1 || pick == 2);
    std::fs::remove_file(json).unwrap();
}

#[test]
fn bad_arguments_are_named() {
    for (args, word) in [
        (vec!["tune", "Nope-v0"], "argument ENV"),
        (vec!["tune", "CartPole-v1", "--workers", "1,x"], "--workers"),
        (vec!["tune", "CartPole-v1", "--seconds", "0"], "--seconds"),
        (vec!["tune", "CartPole-v1", "--env-kwargs", "{"], "--env-kwargs"),
    ] {
        let out = ringenv().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(word), "{args:?}: {err}");
    }
}
