//! The `authzd` command line, and the corpora the engine is held to:
//!
//! * `client`: the client commands (`apply`, `delete`, `get`, `watch`, `status`) against a
//!   running server; `commands`: the offline commands (`check`, `lint`, ...) and their exit
//!   codes;
//! * `helm_directory`: a Helm-rendered policy directory: other kinds skipped and counted by
//!   `lint` and `serve`, a misspelt policy kind refused with `file:line`;
//! * `diff`: `authzd diff` and `apply --dry-run` on the hand-written changes of `tests/diff/`;
//! * `replay`: `authzd replay` against two real servers (recorded on one policy, asked on the
//!   candidate: 0 mismatches over 100,000 requests), its gates and errors;
//! * `test_runner`: `authzd test` on `examples/policy-test.yaml`, its report and JUnit output;
//! * `golden`: the golden corpus of `tests/golden/*.yaml` (policy, requests, expected decision
//!   and reason), asked of the engine.
//!
//! `cargo test --test cli`.

#[path = "../support/mod.rs"]
mod support;

mod change_gate;
mod client;
mod commands;
mod diff;
mod golden;
mod helm_directory;
mod replay;
mod test_runner;
