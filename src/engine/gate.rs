//! PLACEHOLDER while the exact check is built on branch gate-engine; replaced by its merge.
use crate::engine::Engine;
use crate::policy::model::{ChangeGate, GateRuleKind, PolicySet};
use crate::request::Request;

#[derive(Debug)]
pub struct Refusal {
    pub gate: String,
    pub rule: String,
    pub kind: GateRuleKind,
    pub witness: Request,
    pub subject: String,
}

#[derive(Debug)]
pub enum GateError {
    Broken(Refusal),
    Unchecked(String),
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::Broken(r) => write!(f, "ChangeGate `{}` rule `{}`", r.gate, r.rule),
            GateError::Unchecked(m) => f.write_str(m),
        }
    }
}

pub fn check(
    gates: &[ChangeGate],
    _old: &PolicySet,
    _new: &PolicySet,
    _old_engine: &Engine,
    _new_engine: &Engine,
) -> Result<(), GateError> {
    if gates.is_empty() {
        Ok(())
    } else {
        Err(GateError::Unchecked("placeholder".into()))
    }
}
