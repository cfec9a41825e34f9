//! Lean decoding of the answers the load generator checks.
//!
//! The client shares the machine's cores with the server it measures, so every cycle it spends
//! is taken from the server. Decoding a whole `AuthorizeResponse` allocates its reason and every
//! rule reference only to throw them away; the no-op server's empty answers cost nothing to
//! decode, so a full decode would load the authzd side of the comparison alone. These messages
//! read exactly the fields [`Workload`](super::workload::Workload) checks and skip the rest on
//! the wire, without allocating.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

/// The checked fields of `authz.v1.AuthorizeResponse` (field numbers as in authz.proto).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizeAnswer {
    /// `decision = 1`.
    pub decision: i32,
    /// `allowed = 2`.
    pub allowed: bool,
    /// `cached = 9`.
    pub cached: bool,
    /// Whether the message carried any field at all, skipped ones included: the no-op server
    /// must answer an empty message.
    pub non_empty: bool,
}

const DECISION: u32 = 1;
const ALLOWED: u32 = 2;
const CACHED: u32 = 9;

impl prost::Message for AuthorizeAnswer {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.decision != 0 {
            encoding::int32::encode(DECISION, &self.decision, buf);
        }
        if self.allowed {
            encoding::bool::encode(ALLOWED, &self.allowed, buf);
        }
        if self.cached {
            encoding::bool::encode(CACHED, &self.cached, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        self.non_empty = true;
        match tag {
            DECISION => encoding::int32::merge(wire_type, &mut self.decision, buf, ctx),
            ALLOWED => encoding::bool::merge(wire_type, &mut self.allowed, buf, ctx),
            CACHED => encoding::bool::merge(wire_type, &mut self.cached, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        (if self.decision != 0 {
            encoding::int32::encoded_len(DECISION, &self.decision)
        } else {
            0
        }) + (if self.allowed {
            encoding::bool::encoded_len(ALLOWED, &self.allowed)
        } else {
            0
        }) + (if self.cached {
            encoding::bool::encoded_len(CACHED, &self.cached)
        } else {
            0
        })
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// `authz.v1.BatchAuthorizeResponse`: `repeated AuthorizeResponse responses = 1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchAnswer {
    pub responses: Vec<AuthorizeAnswer>,
}

const RESPONSES: u32 = 1;

impl prost::Message for BatchAnswer {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        for response in &self.responses {
            encoding::message::encode(RESPONSES, response, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            RESPONSES => {
                encoding::message::merge_repeated(wire_type, &mut self.responses, buf, ctx)
            }
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        encoding::message::encoded_len_repeated(RESPONSES, &self.responses)
    }

    fn clear(&mut self) {
        self.responses.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;
    use prost::Message;

    fn full(decision: proto::Decision, cached: bool) -> proto::AuthorizeResponse {
        proto::AuthorizeResponse {
            decision: decision as i32,
            allowed: decision == proto::Decision::Allow,
            denied: decision == proto::Decision::Deny,
            reason: "RBAC: allowed by ClusterRoleBinding \"x\"".into(),
            evaluation_error: "an error".into(),
            allowed_by: vec![proto::RuleRef {
                binding: "ClusterRoleBinding/x".into(),
                role: "ClusterRole/y".into(),
                rule_index: 3,
                source: "policy.yaml:7".into(),
                ..Default::default()
            }],
            denied_by: Vec::new(),
            revision: 42,
            cached,
            conditions: Vec::new(),
            cacheable: cached,
        }
    }

    #[test]
    fn reads_the_checked_fields_of_a_full_response_and_skips_the_rest() {
        for (decision, cached) in [
            (proto::Decision::Allow, true),
            (proto::Decision::Deny, false),
            (proto::Decision::NoOpinion, true),
        ] {
            let bytes = full(decision, cached).encode_to_vec();
            let lean = AuthorizeAnswer::decode(bytes.as_slice()).unwrap();
            assert_eq!(lean.decision, decision as i32);
            assert_eq!(lean.allowed, decision == proto::Decision::Allow);
            assert_eq!(lean.cached, cached);
            assert!(lean.non_empty);
        }
    }

    #[test]
    fn an_empty_message_is_told_from_a_default_valued_one() {
        assert!(!AuthorizeAnswer::decode(&[][..]).unwrap().non_empty);
        // Only a skipped field (the reason): still not the no-op server's empty message.
        let reason_only = proto::AuthorizeResponse {
            reason: "r".into(),
            ..Default::default()
        };
        let lean = AuthorizeAnswer::decode(reason_only.encode_to_vec().as_slice()).unwrap();
        assert!(lean.non_empty);
    }

    #[test]
    fn reads_every_answer_of_a_batch_in_order() {
        let batch = proto::BatchAuthorizeResponse {
            responses: vec![
                full(proto::Decision::Allow, false),
                full(proto::Decision::Deny, true),
                proto::AuthorizeResponse::default(),
            ],
        };
        let lean = BatchAnswer::decode(batch.encode_to_vec().as_slice()).unwrap();
        let seen: Vec<(i32, bool)> = lean
            .responses
            .iter()
            .map(|a| (a.decision, a.cached))
            .collect();
        assert_eq!(
            seen,
            vec![
                (proto::Decision::Allow as i32, false),
                (proto::Decision::Deny as i32, true),
                (0, false)
            ]
        );
        // What the lean message encodes, the full one reads back the same.
        let again = proto::BatchAuthorizeResponse::decode(lean.encode_to_vec().as_slice()).unwrap();
        assert_eq!(again.responses[1].decision, proto::Decision::Deny as i32);
        assert!(again.responses[1].cached);
    }

    #[test]
    fn a_truncated_answer_is_an_error() {
        let bytes = full(proto::Decision::Allow, true).encode_to_vec();
        assert!(AuthorizeAnswer::decode(&bytes[..bytes.len() - 3]).is_err());
    }
}
