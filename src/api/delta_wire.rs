//! The access delta ([`crate::engine::delta`]) on the wire, both ways, and the traffic impact
//! beside it ([`traffic_to_wire`]): a dry-run `Apply`
//! answers with it, and `authzd apply --dry-run` reads it back to print it exactly as
//! `authzd diff` prints its own.

use crate::api::convert::{user_info, wire_action};
use crate::engine::delta::{ActionPattern, Delta, Pattern, Row, Scope, Subjects, Witness};
use crate::proto;
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};

/// The delta as `ApplyResponse.delta` carries it.
pub fn to_wire(delta: &Delta) -> proto::AccessDelta {
    proto::AccessDelta {
        rows: delta.rows.iter().map(row_to_wire).collect(),
    }
}

fn row_to_wire(row: &Row) -> proto::AccessDeltaRow {
    let (cluster_wide, except_namespaces, namespace) = match &row.scope {
        Scope::Everywhere { except } => (true, except.clone(), String::new()),
        Scope::Namespace(namespace) => (false, Vec::new(), namespace.clone()),
    };
    let action = match &row.action {
        ActionPattern::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
        } => proto::access_delta_row::Action::Resource(proto::DeltaResourceAction {
            verb: Some(pattern_to_wire(verb)),
            group: Some(pattern_to_wire(group)),
            resource: Some(pattern_to_wire(resource)),
            subresource: Some(pattern_to_wire(subresource)),
            name: Some(pattern_to_wire(name)),
        }),
        ActionPattern::NonResource { verb, path } => {
            proto::access_delta_row::Action::NonResource(proto::DeltaNonResourceAction {
                verb: Some(pattern_to_wire(verb)),
                path: Some(pattern_to_wire(path)),
            })
        }
    };
    proto::AccessDeltaRow {
        cluster_wide,
        except_namespaces,
        namespace,
        action: Some(action),
        gains: Some(subjects_to_wire(&row.gains)),
        losses: Some(subjects_to_wire(&row.losses)),
        witnesses: row
            .witnesses
            .iter()
            .map(|w| proto::DeltaWitness {
                subject: w.subject.clone(),
                gain: w.gain,
                user: Some(user_info(&w.request.user)),
                action: Some(wire_action(&w.request.action)),
            })
            .collect(),
    }
}

fn pattern_to_wire(pattern: &Pattern) -> proto::DeltaPattern {
    use proto::delta_pattern::Pattern as Wire;
    let pattern = match pattern {
        Pattern::Is(value) => Wire::Is(value.clone()),
        Pattern::AnyExcept(values) => Wire::AnyExcept(proto::DeltaValues {
            values: values.clone(),
        }),
        Pattern::Prefix {
            prefix,
            except,
            except_prefixes,
        } => Wire::Prefix(proto::DeltaUrlPrefix {
            prefix: prefix.clone(),
            except: except.clone(),
            except_prefixes: except_prefixes.clone(),
        }),
    };
    proto::DeltaPattern {
        pattern: Some(pattern),
    }
}

fn subjects_to_wire(subjects: &Subjects) -> proto::DeltaSubjects {
    proto::DeltaSubjects {
        users: subjects.users.iter().cloned().collect(),
        groups: subjects.groups.iter().cloned().collect(),
    }
}

/// A delta read back from the wire. The client takes what the server sent: a part the server
/// left out reads as its empty form (a missing pattern as the empty value, a missing action as
/// the empty non-resource action), so a newer server's answer still prints.
pub fn from_wire(wire: proto::AccessDelta) -> Delta {
    Delta {
        rows: wire.rows.into_iter().map(row_from_wire).collect(),
    }
}

fn row_from_wire(row: proto::AccessDeltaRow) -> Row {
    let scope = if row.cluster_wide {
        Scope::Everywhere {
            except: row.except_namespaces,
        }
    } else {
        Scope::Namespace(row.namespace)
    };
    let action = match row.action {
        Some(proto::access_delta_row::Action::Resource(r)) => ActionPattern::Resource {
            verb: pattern_from_wire(r.verb),
            group: pattern_from_wire(r.group),
            resource: pattern_from_wire(r.resource),
            subresource: pattern_from_wire(r.subresource),
            name: pattern_from_wire(r.name),
        },
        Some(proto::access_delta_row::Action::NonResource(n)) => ActionPattern::NonResource {
            verb: pattern_from_wire(n.verb),
            path: pattern_from_wire(n.path),
        },
        None => ActionPattern::NonResource {
            verb: Pattern::Is(String::new()),
            path: Pattern::Is(String::new()),
        },
    };
    Row {
        scope,
        action,
        gains: subjects_from_wire(row.gains),
        losses: subjects_from_wire(row.losses),
        witnesses: row
            .witnesses
            .into_iter()
            .map(|w| Witness {
                subject: w.subject,
                gain: w.gain,
                request: Request {
                    user: user_from_wire(w.user),
                    action: action_from_wire(w.action),
                },
            })
            .collect(),
    }
}

fn pattern_from_wire(wire: Option<proto::DeltaPattern>) -> Pattern {
    use proto::delta_pattern::Pattern as Wire;
    match wire.and_then(|p| p.pattern) {
        Some(Wire::Is(value)) => Pattern::Is(value),
        Some(Wire::AnyExcept(values)) => Pattern::AnyExcept(values.values),
        Some(Wire::Prefix(prefix)) => Pattern::Prefix {
            prefix: prefix.prefix,
            except: prefix.except,
            except_prefixes: prefix.except_prefixes,
        },
        None => Pattern::Is(String::new()),
    }
}

fn subjects_from_wire(wire: Option<proto::DeltaSubjects>) -> Subjects {
    let wire = wire.unwrap_or_default();
    Subjects {
        users: wire.users.into_iter().collect(),
        groups: wire.groups.into_iter().collect(),
    }
}

fn user_from_wire(wire: Option<proto::UserInfo>) -> UserInfo {
    let wire = wire.unwrap_or_default();
    UserInfo {
        name: wire.name,
        uid: wire.uid,
        groups: wire.groups,
        extra: wire
            .extra
            .into_iter()
            .map(|(key, values)| (key, values.values))
            .collect(),
    }
}

fn action_from_wire(wire: Option<proto::Action>) -> Action {
    use proto::action::Kind;
    match wire.and_then(|a| a.kind) {
        Some(Kind::ResourceAttributes(r)) => Action::Resource(ResourceAttributes {
            namespace: r.namespace,
            verb: r.verb,
            group: r.group,
            version: r.version,
            resource: r.resource,
            subresource: r.subresource,
            name: r.name,
        }),
        Some(Kind::NonResourceAttributes(n)) => Action::NonResource(NonResourceAttributes {
            path: n.path,
            verb: n.verb,
        }),
        None => Action::NonResource(NonResourceAttributes {
            path: String::new(),
            verb: String::new(),
        }),
    }
}

/// The most flipped requests an answer lists (the count covers them all).
pub const MAX_FLIPS_LISTED: usize = 1000;

/// A dry run's traffic impact on the wire.
pub fn traffic_to_wire(impact: &crate::serving::TrafficImpact) -> proto::TrafficImpact {
    proto::TrafficImpact {
        cached_requests: u32::try_from(impact.cached_requests).unwrap_or(u32::MAX),
        flipped: u32::try_from(impact.flips.len()).unwrap_or(u32::MAX),
        flips: impact
            .flips
            .iter()
            .take(MAX_FLIPS_LISTED)
            .map(|flip| proto::FlippedRequest {
                user: Some(crate::api::convert::user_info(&flip.request.user)),
                action: Some(crate::api::convert::wire_action(&flip.request.action)),
                allowed_before: flip.allowed_before,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape a row can take survives the round trip unchanged.
    #[test]
    fn a_delta_reads_back_as_it_was_written() {
        let user = UserInfo {
            name: "system:serviceaccount:ci:robot".into(),
            groups: vec!["ops".into()],
            ..UserInfo::default()
        };
        let delta = Delta {
            rows: vec![
                Row {
                    scope: Scope::Everywhere {
                        except: vec![String::new(), "kube-system".into()],
                    },
                    action: ActionPattern::Resource {
                        verb: Pattern::Is("get".into()),
                        group: Pattern::AnyExcept(vec!["apps".into()]),
                        resource: Pattern::Is("pods".into()),
                        subresource: Pattern::Is(String::new()),
                        name: Pattern::AnyExcept(Vec::new()),
                    },
                    gains: Subjects {
                        users: ["system:serviceaccount:ci:robot".to_string()].into(),
                        groups: Default::default(),
                    },
                    losses: Subjects {
                        users: Default::default(),
                        groups: ["ops".to_string()].into(),
                    },
                    witnesses: vec![Witness {
                        subject: "user:system:serviceaccount:ci:robot".into(),
                        gain: true,
                        request: Request {
                            user,
                            action: Action::Resource(ResourceAttributes {
                                namespace: "prod".into(),
                                verb: "get".into(),
                                version: "v1".into(),
                                resource: "pods".into(),
                                ..ResourceAttributes::default()
                            }),
                        },
                    }],
                },
                Row {
                    scope: Scope::Namespace("team".into()),
                    action: ActionPattern::NonResource {
                        verb: Pattern::Is("get".into()),
                        path: Pattern::Prefix {
                            prefix: "/logs/".into(),
                            except: vec!["/logs/secret".into()],
                            except_prefixes: vec!["/logs/private/".into()],
                        },
                    },
                    gains: Subjects::default(),
                    losses: Subjects {
                        users: ["carol".to_string()].into(),
                        groups: Default::default(),
                    },
                    witnesses: Vec::new(),
                },
            ],
        };
        assert_eq!(from_wire(to_wire(&delta)), delta);
    }
}
