//! The crate's worker binary: `describe` and `check` of `BlocksWorld-v0` with typed arguments, and
//! the argument errors, as Python's `make_vec(..., worker=...)` meets them.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let done = Command::new(env!("CARGO_BIN_EXE_symbolic")).args(args).output().unwrap();
    (done.status.success(), String::from_utf8_lossy(&done.stdout).into_owned())
}

#[test]
fn describe_and_check_take_the_typed_arguments() {
    let (ok, out) = run(&["describe", "symbolic:BlocksWorld-v0", "--env-kwargs", r#"{"num_blocks": 4}"#]);
    let description: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(ok, "{out}");
    assert_eq!(description["observation_space"]["shape"], serde_json::json!([44]));
    assert_eq!(description["action_space"]["n"], 20);
    let (ok, out) = run(&["check", "BlocksWorld-v0", "--env-kwargs", r#"{"num_blocks": 3}"#, "--steps", "300"]);
    assert!(ok && out.trim_end().ends_with("PASSED"), "{out}");
}

#[test]
fn bad_arguments_are_named() {
    for (kwargs, message) in [
        (r#"{"num_blocks": 9}"#, "BlocksWorld-v0: num_blocks must be an integer from 2 to 8, got 9"),
        (r#"{"num_blocks": "3"}"#, r#"BlocksWorld-v0: argument \"num_blocks\" = \"3\" does not fit"#),
        (r#"{"colour": 2}"#, r#"BlocksWorld-v0 takes no argument \"colour\"; it accepts num_blocks"#),
    ] {
        let (ok, out) = run(&["describe", "BlocksWorld-v0", "--env-kwargs", kwargs]);
        assert!(!ok && out.contains(message), "{kwargs}: {out}");
    }
}

#[test]
fn passes_check_env_with_five_blocks() {
    let options = ringenv_worker::CheckOptions { steps: 2000, seed: 3 };
    let report = ringenv_worker::check_env(|| symbolic::BlocksWorld::new(5), &options);
    assert!(report.is_ok(), "{report}");
}
