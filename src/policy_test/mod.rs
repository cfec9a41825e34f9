//! `authzd test`: files of expected answers, run against the engine, for users' own CI.
//!
//! A test file (YAML, [`file`]) names its policy and lists cases: a subject, an action, the
//! content rules may need, and what is expected — the decision with the rule that allowed or
//! denied, and who-can lists. [`run`] asks the engine each case exactly as `authzd check` and
//! `authzd who-can` do ([`Engine::authorize_content`], [`Engine::allowed_subjects_content`]:
//! there is no second evaluator), and [`report`] writes the outcome for a person (`PASS` /
//! `FAIL` per case, a summary) or as JUnit XML for a CI system.
//!
//! Loading a file checks everything that can be checked without policy (unknown keys, a
//! decision that is not one, a case that asks nothing), each problem as `file:line: message`;
//! a file that does not load runs none of its cases, and the command exits 2.
//!
//! [`Engine::authorize_content`]: crate::engine::Engine::authorize_content
//! [`Engine::allowed_subjects_content`]: crate::engine::Engine::allowed_subjects_content

pub mod file;
pub mod report;
pub mod run;

pub use file::{load_file, Case, Expect, FileError, TestFile, WhoCanExpect};
pub use run::{run_case, CaseOutcome, FileOutcome};
