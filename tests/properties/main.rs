//! Properties of the engine and the store, on random policies, requests and changes (the
//! generators of `tests/support/generators.rs`), each held to a simpler oracle:
//!
//! * `differential`: the compiled index answers Authorize and who-can as the reference
//!   evaluator does;
//! * `conditional`: conditions returned without content finish as Authorize with content;
//! * `rules_review`: SubjectRulesReview's rules decide as Authorize does;
//! * `search`: AuthZEN's subject, action and resource searches agree with Authorize both ways;
//! * `delta`: the access delta of a change is complete and witnessed;
//! * `gate`: a ChangeGate refuses exactly the writes a brute-force oracle finds breaking it;
//! * `escalation`: escalation prevention passes exactly the writes whose every grant a
//!   brute-force oracle finds held by their author;
//! * `incremental`: an updated engine answers as one built from scratch;
//! * `impact`: a change's impact covers every answer it changes;
//! * `applier`: etcd mode's in-place applier publishes what a copy would;
//! * `proxy_paths`: `authzd proxy` authorizes exactly the path it forwards, or refuses it;
//! * `shapes`: the benches' policy shapes get their expected answers.
//!
//! How many cases each property runs is `tests/support/cases.rs`'s: full strength under
//! `CI=true` (10,000 for the differential, conditional and rules-review properties), 256/10,000
//! of it locally; `PROPTEST_CASES=10000 cargo test --test properties` is the CI run.
//! Failing seeds are kept beside each file (`delta.proptest-regressions`) and replayed first.

#[path = "../support/mod.rs"]
mod support;

mod applier;
mod conditional;
mod delta;
mod differential;
mod escalation;
mod gate;
mod impact;
mod incremental;
mod proxy_paths;
mod rules_review;
mod search;
mod shapes;
