//! The wire fast path against prost, its oracle: what the view reader accepts, prost decodes to
//! the same request; what a view validates to, `convert` gives from prost's message; what a
//! reply encodes, prost encodes for `convert::authorize_response`.

use std::collections::HashMap;

use proptest::prelude::*;
use tonic::Status;

use super::*;
use crate::api::limits::ContentLimits;
use crate::engine::content::ContentError;
use crate::engine::{Authorize, EncodedOnce};
use crate::request::Request;

/// Strings as clients send them, with the edge cases validation and UTF-8 care about.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z:.-]{0,12}",
        2 => "\\PC{0,6}",
        1 => Just(String::new()),
        1 => (4090usize..4100).prop_map(|n| "x".repeat(n)),
    ]
}

fn resource() -> impl Strategy<Value = proto::ResourceAttributes> {
    (text(), text(), text(), text(), text(), text(), text()).prop_map(
        |(namespace, verb, group, version, resource, subresource, name)| {
            proto::ResourceAttributes {
                namespace,
                verb,
                group,
                version,
                resource,
                subresource,
                name,
                // Selectors are content: never read by the view (see `carrying_content`).
                field_selector: None,
                label_selector: None,
            }
        },
    )
}

fn action() -> impl Strategy<Value = Option<proto::Action>> {
    use proto::action::Kind;
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(proto::Action { kind: None })),
        6 => resource().prop_map(|r| Some(proto::Action {
            kind: Some(Kind::ResourceAttributes(r)),
        })),
        2 => (text(), text()).prop_map(|(path, verb)| Some(proto::Action {
            kind: Some(Kind::NonResourceAttributes(proto::NonResourceAttributes { path, verb })),
        })),
    ]
}

fn user(with_extra: bool) -> impl Strategy<Value = Option<proto::UserInfo>> {
    let extra = if with_extra {
        proptest::collection::hash_map(text(), proptest::collection::vec(text(), 0..3), 0..3)
            .boxed()
    } else {
        Just(HashMap::new()).boxed()
    };
    prop_oneof![
        1 => Just(None),
        9 => (text(), text(), proptest::collection::vec(text(), 0..20), extra).prop_map(
            |(name, uid, groups, extra)| Some(proto::UserInfo {
                name,
                uid,
                groups,
                extra: extra
                    .into_iter()
                    .map(|(k, values)| (k, proto::ExtraValues { values }))
                    .collect(),
            })
        ),
    ]
}

fn authorize_request(with_extra: bool) -> impl Strategy<Value = proto::AuthorizeRequest> {
    (
        user(with_extra),
        action(),
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(|(user, action, min_revision)| proto::AuthorizeRequest {
            user,
            action,
            min_revision,
            content: None,
            conditions_mode: 0,
        })
}

/// A plain request made to carry content: objects or changed paths, and selectors on a
/// resource action (some of them invalid, which prost's path must refuse as `convert` does).
fn carrying_content() -> impl Strategy<Value = proto::AuthorizeRequest> {
    let selector = || {
        (
            prop_oneof![Just(String::new()), Just("a=b".to_string()), text()],
            proptest::collection::vec(
                (
                    text(),
                    prop::sample::select(vec!["In", "Exists", "Gt"]),
                    proptest::collection::vec(text(), 0..2),
                )
                    .prop_map(|(key, operator, values)| {
                        proto::SelectorRequirement {
                            key,
                            operator: operator.into(),
                            values,
                        }
                    }),
                0..2,
            ),
        )
    };
    (
        authorize_request(false),
        proptest::collection::vec(any::<u8>(), 0..16),
        proptest::collection::vec(any::<u8>(), 0..16),
        proptest::collection::vec(text(), 0..2),
        proptest::option::of(selector()),
        proptest::option::of(selector()),
        any::<bool>(),
    )
        .prop_map(
            |(mut request, object, old_object, changed_paths, field, label, with_content)| {
                if with_content {
                    request.content = Some(proto::Content {
                        object,
                        old_object,
                        changed_paths,
                    });
                }
                if let Some(proto::Action {
                    kind: Some(proto::action::Kind::ResourceAttributes(r)),
                }) = request.action.as_mut()
                {
                    r.field_selector =
                        field.map(
                            |(raw_selector, requirements)| proto::FieldSelectorAttributes {
                                raw_selector,
                                requirements,
                            },
                        );
                    r.label_selector =
                        label.map(
                            |(raw_selector, requirements)| proto::LabelSelectorAttributes {
                                raw_selector,
                                requirements,
                            },
                        );
                }
                request
            },
        )
}

/// What the server would act on: the engine's request, its content (as `Debug` shows it) and
/// `min_revision`, or the error text.
type Acted = (Request, String, u64);

fn through_prost(bytes: &[u8]) -> std::result::Result<Acted, String> {
    let wire = proto::AuthorizeRequest::decode(bytes).map_err(|e| e.to_string())?;
    let min_revision = wire.min_revision;
    convert::authorize_request(wire, &ContentLimits::default())
        .map(|(request, content)| (request, format!("{content:?}"), min_revision))
        .map_err(|e| Status::from(e).message().to_owned())
}

fn through_wire(bytes: &[u8]) -> std::result::Result<Acted, String> {
    let call = AuthorizeCall::from(Bytes::copy_from_slice(bytes));
    let message = |e: ApiError| Status::from(e).message().to_owned();
    let decoded = call.decode().map_err(message)?;
    match decoded {
        Decoded::View(view) => {
            view.validate().map_err(message)?;
            let input = AuthorizeInput::Borrowed(&view);
            let none: Option<request::Content> = None;
            Ok((
                input.to_request().into_owned(),
                format!("{none:?}"),
                view.min_revision,
            ))
        }
        Decoded::Owned(wire) => {
            let min_revision = wire.min_revision;
            let (request, content) =
                convert::authorize_request(wire, &ContentLimits::default()).map_err(message)?;
            Ok((request, format!("{content:?}"), min_revision))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Requests as clients encode them: same answer both ways, and (without `extra`) through
    /// the view, so the fast path is what is being compared.
    #[test]
    fn decoding_and_validation_match_prost(request in authorize_request(true)) {
        let bytes = request.encode_to_vec();
        prop_assert_eq!(through_wire(&bytes), through_prost(&bytes));
        let has_extra = request.user.as_ref().is_some_and(|u| !u.extra.is_empty());
        let call = AuthorizeCall::from(Bytes::from(bytes));
        prop_assert_eq!(
            matches!(call.decode(), Ok(Decoded::View(_))),
            !has_extra,
            "the plain shape must take the view"
        );
    }

    /// A request carrying content or selectors is never a view: prost reads it, `convert`
    /// bounds it, and the server acts on the same request and content as through prost alone
    /// (the view's `AuthorizeRequest` has no field for them). In a batch, one such item sends
    /// the whole batch to prost, as any field the view does not take does.
    #[test]
    fn content_and_selectors_take_prosts_path(
        request in carrying_content(),
        plain in authorize_request(false),
    ) {
        let carries = request.content.is_some()
            || matches!(
                request.action.as_ref().and_then(|a| a.kind.as_ref()),
                Some(proto::action::Kind::ResourceAttributes(r))
                    if r.field_selector.is_some() || r.label_selector.is_some()
            );
        let bytes = request.encode_to_vec();
        prop_assert_eq!(through_wire(&bytes), through_prost(&bytes));
        let call = AuthorizeCall::from(Bytes::from(bytes));
        let decoded = call.decode();
        match decoded {
            Ok(Decoded::Owned(decoded)) => prop_assert_eq!(&decoded, &request),
            Ok(Decoded::View(_)) => prop_assert!(!carries, "content read as a view"),
            Err(error) => prop_assert!(false, "a valid request did not decode: {}", error),
        }
        let batch = proto::BatchAuthorizeRequest { requests: vec![plain, request.clone()] };
        let call = BatchAuthorizeCall::from(Bytes::from(batch.encode_to_vec()));
        let decoded = call.decode();
        match decoded {
            Ok(BatchDecoded::Owned(decoded)) => prop_assert_eq!(decoded, batch),
            Ok(BatchDecoded::Views(_)) => prop_assert!(!carries, "content read as a view"),
            Err(error) => prop_assert!(false, "a valid batch did not decode: {}", error),
        }
    }

    /// Any bytes the view reader accepts, prost decodes to the same message; and the server
    /// acts the same on arbitrary damage to real requests (truncated, bytes changed, two
    /// encodings concatenated, which prost merges).
    #[test]
    fn damaged_requests_match_prost(
        first in authorize_request(false),
        second in authorize_request(false),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        concatenate in any::<bool>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = first.encode_to_vec();
        if concatenate {
            bytes.extend(second.encode_to_vec());
        }
        for (at, byte) in edits {
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
        }
        if truncate && !bytes.is_empty() {
            bytes.truncate(cut.index(bytes.len()));
        }
        if let Some(view) = read_authorize(&bytes) {
            let decoded = proto::AuthorizeRequest::decode(&bytes[..]);
            prop_assert!(decoded.is_ok(), "the view read what prost refuses: {:?}", decoded);
            if let Ok(decoded) = decoded {
                prop_assert_eq!(view_as_proto(&view), normalized(decoded));
            }
        }
        prop_assert_eq!(through_wire(&bytes), through_prost(&bytes));
    }

    #[test]
    fn batches_match_prost(
        requests in proptest::collection::vec(authorize_request(false), 0..6),
        with_extra in authorize_request(true),
        add_extra in any::<bool>(),
    ) {
        let mut batch = proto::BatchAuthorizeRequest { requests };
        if add_extra {
            batch.requests.push(with_extra);
        }
        let bytes = batch.encode_to_vec();
        prop_assert_eq!(count_items(&bytes, crate::api::limits::MAX_BATCH), batch.requests.len());
        prop_assert_eq!(count_items(&bytes, 2), batch.requests.len().min(2));
        let call = BatchAuthorizeCall::from(Bytes::from(bytes));
        match call.decode() {
            Ok(BatchDecoded::Views(views)) => {
                // Sized by the counting pass, never grown.
                prop_assert_eq!(views.capacity(), views.len());
                let mine: Vec<proto::AuthorizeRequest> = views.iter().map(view_as_proto).collect();
                prop_assert_eq!(mine, batch.requests.into_iter().map(normalized).collect::<Vec<_>>());
            }
            Ok(BatchDecoded::Owned(owned)) => {
                prop_assert!(
                    batch.requests.iter().any(|r| r.user.as_ref().is_some_and(|u| !u.extra.is_empty())),
                    "a plain batch fell back to prost"
                );
                prop_assert_eq!(owned, batch);
            }
            Err(error) => prop_assert!(false, "a valid batch did not decode: {}", error),
        };
    }

    /// Replies are byte for byte what prost writes for `convert::authorize_response`. The batch
    /// answers share each single answer's `Arc<Response>` (so its encoded fields, kept in the
    /// response) but not its revision or cached flag, as a later cache hit does.
    #[test]
    fn replies_encode_as_prost(
        answers in proptest::collection::vec(decided(), 0..5),
        revision in prop_oneof![Just(0u64), any::<u64>()],
    ) {
        let mut batch_bytes = Vec::new();
        let mut expected_batch = proto::BatchAuthorizeResponse::default();
        let mut mine = Vec::new();
        for decided in answers {
            let expected = convert::authorize_response(&decided, revision);
            let mut single = Vec::new();
            let reply = AuthorizeReply::new(Answer::new(decided.clone(), revision));
            reply.encode_wire(&mut single);
            prop_assert_eq!(reply.encoded_len(), single.len());
            prop_assert_eq!(&single, &expected.encode_to_vec());
            let later = Decided { cached: !decided.cached, ..decided };
            let later_revision = revision.wrapping_add(1);
            expected_batch.responses.push(convert::authorize_response(&later, later_revision));
            mine.push(Answer::new(later, later_revision));
        }
        let batch = BatchAuthorizeReply::new(mine);
        batch.encode_wire(&mut batch_bytes);
        prop_assert_eq!(batch.encoded_len(), batch_bytes.len());
        prop_assert_eq!(batch_bytes, expected_batch.encode_to_vec());
    }
}

fn rule_ref() -> impl Strategy<Value = RuleRef> {
    (
        prop_oneof![Just("RBAC"), Just("ABAC"), Just("SuperUser"), Just("")],
        text(),
        text(),
        prop_oneof![Just(0u32), any::<u32>()],
        text(),
    )
        .prop_map(|(authorizer, binding, role, rule_index, source)| RuleRef {
            authorizer,
            binding: binding.into(),
            role: role.into(),
            rule_index,
            source: source.into(),
        })
}

fn decided() -> impl Strategy<Value = Decided> {
    (
        prop_oneof![
            Just(Decision::Allow),
            Just(Decision::Deny),
            Just(Decision::NoOpinion)
        ],
        text(),
        proptest::collection::vec(rule_ref(), 0..3),
        proptest::collection::vec(rule_ref(), 0..3),
        proptest::collection::vec(text(), 0..3),
        any::<(bool, bool)>(),
    )
        .prop_map(
            |(decision, reason, allowed_by, denied_by, errors, (cached, cacheable))| Decided {
                response: Arc::new(Response {
                    decision,
                    reason,
                    allowed_by,
                    denied_by,
                    errors,
                    encoded: EncodedOnce::default(),
                    recorded: EncodedOnce::default(),
                    plan: Default::default(),
                }),
                cached,
                cacheable,
            },
        )
}

/// A view as the prost message it stands for.
fn view_as_proto(view: &AuthorizeView<'_>) -> proto::AuthorizeRequest {
    use proto::action::Kind;
    proto::AuthorizeRequest {
        user: view.user.as_ref().map(|u| proto::UserInfo {
            name: u.name.into(),
            uid: u.uid.into(),
            groups: u.groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: HashMap::new(),
        }),
        action: view.action.map(|action| proto::Action {
            kind: Some(match action {
                ActionRef::Resource(r) => Kind::ResourceAttributes(proto::ResourceAttributes {
                    namespace: r.namespace.into(),
                    verb: r.verb.into(),
                    group: r.group.into(),
                    version: r.version.into(),
                    resource: r.resource.into(),
                    subresource: r.subresource.into(),
                    name: r.name.into(),
                    field_selector: None,
                    label_selector: None,
                }),
                ActionRef::NonResource { path, verb } => {
                    Kind::NonResourceAttributes(proto::NonResourceAttributes {
                        path: path.into(),
                        verb: verb.into(),
                    })
                }
            }),
        }),
        min_revision: view.min_revision,
        content: None,
        conditions_mode: 0,
    }
}

/// A view has no action where prost has an action without a kind: the same request (both are
/// refused as a missing action).
fn normalized(mut request: proto::AuthorizeRequest) -> proto::AuthorizeRequest {
    if request.action.as_ref().is_some_and(|a| a.kind.is_none()) {
        request.action = None;
    }
    request
}

#[test]
fn a_repeated_user_is_merged_by_prost() {
    let one = proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: "alice".into(),
            groups: vec!["a".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let two = proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            groups: vec!["b".into()],
            ..Default::default()
        }),
        action: healthz(),
        ..Default::default()
    };
    let mut bytes = one.encode_to_vec();
    bytes.extend(two.encode_to_vec());
    let call = AuthorizeCall::from(Bytes::from(bytes));
    let Ok(Decoded::Owned(merged)) = call.decode() else {
        panic!("a repeated embedded message must be decoded by prost");
    };
    let user = merged.user.unwrap();
    assert_eq!(user.name, "alice");
    assert_eq!(user.groups, ["a", "b"]);
}

#[test]
fn undecodable_bytes_are_invalid_argument_with_prosts_reason() {
    let call = AuthorizeCall::from(Bytes::from_static(&[0x0a, 0x05, b'a']));
    let status = Status::from(call.decode().unwrap_err());
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("failed to decode Protobuf message"),
        "{}",
        status.message()
    );
}

#[test]
fn unknown_fields_of_every_wire_type_take_prosts_path() {
    let request = proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: "alice".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let plain = request.encode_to_vec();
    assert!(read_authorize(&plain).is_some());
    // field 9 varint, field 10 fixed64, field 11 bytes, field 12 fixed32
    for unknown in [
        &[0x48, 0x96, 0x01][..],
        &[0x51, 1, 2, 3, 4, 5, 6, 7, 8],
        &[0x5a, 0x02, b'h', b'i'],
        &[0x65, 1, 2, 3, 4],
    ] {
        let mut bytes = plain.clone();
        bytes.extend(unknown);
        assert!(read_authorize(&bytes).is_none(), "{unknown:x?}");
        let call = AuthorizeCall::from(Bytes::from(bytes));
        let Ok(Decoded::Owned(decoded)) = call.decode() else {
            panic!("an unknown field {unknown:x?} must be decoded by prost");
        };
        assert_eq!(decoded, request);
    }
}

/// Where a test puts a field the view does not know: each message level the reader reads.
#[derive(Clone, Copy, Debug)]
enum Level {
    Batch,
    Request,
    User,
    Action,
    Resource,
    NonResource,
}

impl Level {
    const ALL: [Level; 6] = [
        Level::Batch,
        Level::Request,
        Level::User,
        Level::Action,
        Level::Resource,
        Level::NonResource,
    ];

    /// The message at this level as the view reader's field table declares it.
    fn message(self) -> fields::Message {
        match self {
            Level::Batch => fields::batch_authorize_request::MESSAGE,
            Level::Request => fields::authorize_request::MESSAGE,
            Level::User => fields::user_info::MESSAGE,
            Level::Action => fields::action::MESSAGE,
            Level::Resource => fields::resource_attributes::MESSAGE,
            Level::NonResource => fields::non_resource_attributes::MESSAGE,
        }
    }

    fn knows(self, number: u32) -> bool {
        self.message().fields.iter().any(|(n, _)| *n == number)
    }
}

/// A varint, written here rather than with the encoder under test.
fn put_test_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A length-delimited field holding `body`.
fn len_field(number: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_test_varint(&mut out, u64::from(number << 3 | 2));
    put_test_varint(&mut out, body.len() as u64);
    out.extend(body);
    out
}

/// One field numbered `number`, of each wire type by `kind`: varint, fixed64, bytes, a group
/// (holding a varint), fixed32.
fn unknown_field(number: u32, kind: u8, value: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let key = |out: &mut Vec<u8>, wire_type: u32| {
        put_test_varint(out, u64::from(number << 3 | wire_type));
    };
    match kind % 5 {
        0 => {
            key(&mut out, 0);
            put_test_varint(&mut out, value);
        }
        1 => {
            key(&mut out, 1);
            out.extend(value.to_le_bytes());
        }
        2 => out = len_field(number, bytes),
        3 => {
            key(&mut out, 3);
            put_test_varint(&mut out, 1 << 3);
            put_test_varint(&mut out, value);
            key(&mut out, 4);
        }
        _ => {
            key(&mut out, 5);
            out.extend((value as u32).to_le_bytes());
        }
    }
    out
}

/// `request` encoded with `unknown` appended to the message at `level` (created empty if the
/// request has none there; `Batch` is the request's own level here). The embedded messages are
/// written after the request's other fields, which prost and the view read the same in any
/// order.
fn with_unknown(request: &proto::AuthorizeRequest, level: Level, unknown: &[u8]) -> Vec<u8> {
    use fields::{action as act, authorize_request as req};
    use proto::action::Kind;
    let plus = |mut message: Vec<u8>| {
        message.extend(unknown);
        message
    };
    let without_action = proto::AuthorizeRequest {
        action: None,
        ..request.clone()
    };
    let resource = match request.action.as_ref().and_then(|a| a.kind.as_ref()) {
        Some(Kind::ResourceAttributes(r)) => r.clone(),
        _ => proto::ResourceAttributes::default(),
    };
    let non_resource = match request.action.as_ref().and_then(|a| a.kind.as_ref()) {
        Some(Kind::NonResourceAttributes(n)) => n.clone(),
        _ => proto::NonResourceAttributes::default(),
    };
    let mut bytes;
    match level {
        Level::Batch | Level::Request => bytes = plus(request.encode_to_vec()),
        Level::User => {
            bytes = proto::AuthorizeRequest {
                user: None,
                ..request.clone()
            }
            .encode_to_vec();
            let user = request.user.clone().unwrap_or_default();
            bytes.extend(len_field(req::USER, &plus(user.encode_to_vec())));
        }
        Level::Action => {
            bytes = without_action.encode_to_vec();
            let action = request.action.clone().unwrap_or_default();
            bytes.extend(len_field(req::ACTION, &plus(action.encode_to_vec())));
        }
        Level::Resource => {
            bytes = without_action.encode_to_vec();
            let body = plus(resource.encode_to_vec());
            let action = len_field(act::RESOURCE_ATTRIBUTES, &body);
            bytes.extend(len_field(req::ACTION, &action));
        }
        Level::NonResource => {
            bytes = without_action.encode_to_vec();
            let body = plus(non_resource.encode_to_vec());
            let action = len_field(act::NON_RESOURCE_ATTRIBUTES, &body);
            bytes.extend(len_field(req::ACTION, &action));
        }
    }
    bytes
}

/// A batch of `requests` with `unknown` in item `at` at `level`, or between the items (before
/// item `at`) for `Level::Batch`.
fn batch_with_unknown(
    requests: &[proto::AuthorizeRequest],
    at: usize,
    level: Level,
    unknown: &[u8],
) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let item = match level {
            _ if i != at => request.encode_to_vec(),
            Level::Batch => {
                bytes.extend(unknown);
                request.encode_to_vec()
            }
            _ => with_unknown(request, level, unknown),
        };
        bytes.extend(len_field(fields::batch_authorize_request::REQUESTS, &item));
    }
    if at >= requests.len() && matches!(level, Level::Batch) {
        bytes.extend(unknown);
    }
    bytes
}

/// Field 99, unknown to every message the reader reads, sends the request (or the batch) to
/// prost at each level, and prost's message is the one without it: nothing is lost.
#[test]
fn field_99_at_every_level_takes_prosts_path() {
    let unknown = unknown_field(99, 2, 0, b"trace");
    let resource = proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        }),
        action: Some(proto::Action {
            kind: Some(proto::action::Kind::ResourceAttributes(
                proto::ResourceAttributes {
                    verb: "get".into(),
                    resource: "pods".into(),
                    ..Default::default()
                },
            )),
        }),
        min_revision: 7,
        content: None,
        conditions_mode: 0,
    };
    let non_resource = proto::AuthorizeRequest {
        action: healthz(),
        ..resource.clone()
    };
    for level in Level::ALL {
        assert!(!level.knows(99));
        let request = match level {
            Level::NonResource => &non_resource,
            _ => &resource,
        };
        let plain = with_unknown(request, level, &[]);
        assert!(read_authorize(&plain).is_some(), "{level:?}: plain");
        let bytes = with_unknown(request, level, &unknown);
        let call = AuthorizeCall::from(Bytes::from(bytes.clone()));
        let Ok(Decoded::Owned(decoded)) = call.decode() else {
            panic!("{level:?}: field 99 must be decoded by prost");
        };
        assert_eq!(
            decoded,
            proto::AuthorizeRequest::decode(&bytes[..]).unwrap()
        );
        assert_eq!(&decoded, request, "{level:?}");

        let batch = [request.clone(), non_resource.clone()];
        let bytes = batch_with_unknown(&batch, 0, level, &unknown);
        let call = BatchAuthorizeCall::from(Bytes::from(bytes));
        let Ok(BatchDecoded::Owned(decoded)) = call.decode() else {
            panic!("{level:?}: field 99 in a batch must be decoded by prost");
        };
        assert_eq!(decoded.requests, batch, "{level:?}");
    }
}

/// The batch's `requests` with another wire type is prost's error, not an item skipped.
#[test]
fn a_batch_item_of_the_wrong_wire_type_is_prosts_error() {
    let mut bytes = len_field(fields::batch_authorize_request::REQUESTS, &request_bytes());
    // `requests` as a varint.
    put_test_varint(
        &mut bytes,
        u64::from(fields::batch_authorize_request::REQUESTS << 3),
    );
    bytes.push(0);
    assert!(proto::BatchAuthorizeRequest::decode(&bytes[..]).is_err());
    let error = BatchAuthorizeCall::from(Bytes::from(bytes))
        .decode()
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
}

/// Field numbers: small ones (near and among the known) and any other valid one.
fn field_number() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..=16, 17u32..=(1 << 29) - 1]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any field number a message's table does not declare, of any wire type, at any level the
    /// reader reads, in a request or a batch item: prost's path, prost's message (the request
    /// without the field), and the same answer as through prost.
    #[test]
    fn unknown_fields_at_any_level_decode_as_prost(
        request in authorize_request(false),
        others in proptest::collection::vec(authorize_request(false), 0..3),
        level in proptest::sample::select(Level::ALL.to_vec()),
        number in field_number(),
        kind in 0u8..5,
        value in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..8),
        at in any::<prop::sample::Index>(),
    ) {
        prop_assume!(!level.knows(number));
        let unknown = unknown_field(number, kind, value, &payload);

        if !matches!(level, Level::Batch) {
            let plain = with_unknown(&request, level, &[]);
            prop_assert!(read_authorize(&plain).is_some(), "plain request refused by the view");
            let bytes = with_unknown(&request, level, &unknown);
            // prost skips the field: its message is the one without it.
            let prosts = proto::AuthorizeRequest::decode(&bytes[..]);
            prop_assert!(prosts.is_ok());
            prop_assert_eq!(&prosts, &proto::AuthorizeRequest::decode(&plain[..]));
            let call = AuthorizeCall::from(Bytes::from(bytes.clone()));
            let decoded = call.decode();
            prop_assert!(
                matches!(&decoded, Ok(Decoded::Owned(d)) if Ok(d) == prosts.as_ref()),
                "not prost's: {:?}",
                decoded
            );
            prop_assert_eq!(through_wire(&bytes), through_prost(&bytes));
        }

        let mut batch = others;
        let at = at.index(batch.len() + 1);
        batch.insert(at, request);
        let bytes = batch_with_unknown(&batch, at, level, &unknown);
        let prosts = proto::BatchAuthorizeRequest::decode(&bytes[..]).unwrap();
        let mut expected = batch.clone();
        let plain = with_unknown(&batch[at], level, &[]);
        expected[at] = proto::AuthorizeRequest::decode(&plain[..]).unwrap();
        prop_assert_eq!(&prosts.requests, &expected);
        let call = BatchAuthorizeCall::from(Bytes::from(bytes));
        let decoded = call.decode();
        prop_assert!(
            matches!(&decoded, Ok(BatchDecoded::Owned(d)) if *d == prosts),
            "batch not prost's: {:?}",
            decoded
        );
    }
}

#[test]
fn ten_byte_varints_are_read_as_prost_reads_them() {
    // min_revision (field 3) as a ten-byte varint: the tenth byte may only be 0 or 1.
    let with_tenth = |tenth: u8| {
        let mut bytes = vec![0x18];
        bytes.extend([0xff; 9]);
        bytes.push(tenth);
        bytes
    };
    let max = with_tenth(1);
    assert_eq!(read_authorize(&max).map(|v| v.min_revision), Some(u64::MAX));
    assert_eq!(
        proto::AuthorizeRequest::decode(&max[..])
            .unwrap()
            .min_revision,
        u64::MAX
    );
    for tenth in [2, 3, 0x7f, 0x80] {
        let bytes = with_tenth(tenth);
        assert!(read_authorize(&bytes).is_none(), "tenth byte {tenth:#x}");
        assert!(proto::AuthorizeRequest::decode(&bytes[..]).is_err());
        assert_eq!(through_wire(&bytes), through_prost(&bytes));
    }
    // An overlong encoding of a small value is still that value, as in prost.
    let overlong = [0x18, 0x85, 0x80, 0x00];
    assert_eq!(read_authorize(&overlong).map(|v| v.min_revision), Some(5));
}

#[test]
fn a_batch_over_the_limit_is_counted_not_decoded() {
    use crate::api::limits::MAX_BATCH;
    let item = proto::AuthorizeRequest::default();
    let batch = |items: usize, extra_at: Option<usize>| {
        let mut requests = vec![item.clone(); items];
        if let Some(at) = extra_at {
            let mut user = proto::UserInfo::default();
            user.extra.insert("k".into(), proto::ExtraValues::default());
            requests[at].user = Some(user);
        }
        BatchAuthorizeCall::from(Bytes::from(
            proto::BatchAuthorizeRequest { requests }.encode_to_vec(),
        ))
    };
    let at_limit = batch(MAX_BATCH, None);
    assert!(matches!(at_limit.decode(), Ok(BatchDecoded::Views(v)) if v.len() == MAX_BATCH));
    let over = batch(MAX_BATCH + 1, None);
    assert_eq!(refused_as_too_many(over.decode()), Some(MAX_BATCH + 1));
    // An item prost would have to decode does not make the batch prost's once it is too big.
    let over_with_extra = batch(MAX_BATCH * 3, Some(5));
    assert_eq!(
        refused_as_too_many(over_with_extra.decode()),
        Some(MAX_BATCH * 3)
    );
    let at_limit_with_extra = batch(MAX_BATCH, Some(5));
    assert!(
        matches!(at_limit_with_extra.decode(), Ok(BatchDecoded::Owned(b)) if b.requests.len() == MAX_BATCH)
    );
    // Malformed after too many items: still refused as too many, before prost sees it.
    let mut bytes = over.0.to_vec();
    bytes.extend([0x0a, 0x7f]);
    let truncated = BatchAuthorizeCall::from(Bytes::from(bytes));
    assert_eq!(refused_as_too_many(truncated.decode()), Some(MAX_BATCH + 1));
    // Malformed within the limit: prost's error.
    let mut bytes = batch(2, None).0.to_vec();
    bytes.extend([0x0a, 0x7f]);
    let error = BatchAuthorizeCall::from(Bytes::from(bytes))
        .decode()
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
}

#[test]
fn unknown_groups_are_skipped_as_prost_skips_them() {
    use crate::api::limits::MAX_BATCH;
    // Field 9 as a group holding a varint and a nested group (field 10), then its end.
    let group = [0x4b, 0x08, 0x01, 0x53, 0x54, 0x4c];
    let item = request_bytes();
    let mut with_group = group.to_vec();
    for _ in 0..3 {
        with_group.extend([0x0a, item.len() as u8]);
        with_group.extend(&item);
    }
    // Skipped to count the items; the batch is prost's, as for any field the view does not
    // know.
    assert_eq!(count_items(&with_group, MAX_BATCH), 3);
    let call = BatchAuthorizeCall::from(Bytes::from(with_group.clone()));
    let prosts = proto::BatchAuthorizeRequest::decode(&with_group[..]).unwrap();
    assert_eq!(prosts.requests.len(), 3);
    assert!(matches!(call.decode(), Ok(BatchDecoded::Owned(b)) if b == prosts));
    // Inside an item: prost's too.
    let mut in_item = group.to_vec();
    in_item.extend(&item);
    assert!(read_authorize(&in_item).is_none());
    assert!(proto::AuthorizeRequest::decode(&in_item[..]).is_ok());
    assert_eq!(through_wire(&in_item), through_prost(&in_item));
    // A group first does not stop the count: too many is still too many.
    let mut many = group.to_vec();
    for _ in 0..=MAX_BATCH {
        many.extend([0x0a, 0x00]);
    }
    let call = BatchAuthorizeCall::from(Bytes::from(many));
    assert_eq!(refused_as_too_many(call.decode()), Some(MAX_BATCH + 1));
    // An end that does not match its start is prost's error.
    let bad = [0x4b, 0x54];
    assert!(read_authorize(&bad).is_none());
    assert!(proto::AuthorizeRequest::decode(&bad[..]).is_err());
    assert_eq!(through_wire(&bad), through_prost(&bad));
}

fn request_bytes() -> Vec<u8> {
    proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: "alice".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn groups_past_the_limit_are_counted_not_kept() {
    use crate::api::limits::MAX_GROUPS;
    let request = proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: "alice".into(),
            groups: vec![String::new(); MAX_GROUPS * 4],
            ..Default::default()
        }),
        action: healthz(),
        min_revision: 0,
        content: None,
        conditions_mode: 0,
    };
    let bytes = request.encode_to_vec();
    let user = read_authorize(&bytes).and_then(|v| v.user).unwrap();
    assert_eq!(user.groups.len(), MAX_GROUPS + 1);
    assert_eq!(user.group_count, MAX_GROUPS * 4);
    let refused = through_wire(&bytes).unwrap_err();
    assert_eq!(refused, through_prost(&bytes).unwrap_err());
    assert!(
        refused.contains(&format!("{} entries", MAX_GROUPS * 4)),
        "{refused}"
    );
}

/// `get /healthz`: a valid non-resource action.
fn healthz() -> Option<proto::Action> {
    Some(proto::Action {
        kind: Some(proto::action::Kind::NonResourceAttributes(
            proto::NonResourceAttributes {
                path: "/healthz".into(),
                verb: "get".into(),
            },
        )),
    })
}

/// The batch buffers hold a hundred requests and answers like the load generator's without
/// growing: the request on top of a full 16 KiB first frame (tonic reserves the message's
/// length beyond what is already gathered), the answers as encoded.
#[test]
fn batch_buffers_hold_a_hundred_typical_requests_and_answers() {
    use crate::engine::{Authorize as _, Engine, EngineConfig};
    use crate::loadgen::workload::authorize_message;
    use crate::synth::{self, Shape};
    let shape = Shape::with_bindings(1000);
    let engine = Engine::new(&synth::policy(&shape, 42), EngineConfig::default());
    let probes = [
        synth::allowed_request(&shape),
        synth::denied_request(&shape),
        synth::unmatched_request(&shape),
    ];
    // The load generator's fresh names: 16 hex digits.
    let item = |request: &Request| authorize_message(request, "0123456789abcdef");
    let requests: Vec<_> = probes.iter().cycle().take(100).map(item).collect();
    let request_len = proto::BatchAuthorizeRequest { requests }.encoded_len();
    assert!(
        16 * 1024 + request_len <= BATCH_REQUEST_BUFFER_SIZE,
        "{request_len}"
    );
    let answers = probes
        .iter()
        .cycle()
        .take(100)
        .map(|request| Answer::new(engine.decide(request.as_borrowed()), 1))
        .collect();
    let reply_len = BatchAuthorizeReply::new(answers).encoded_len();
    assert!(5 + reply_len <= BATCH_REPLY_BUFFER_SIZE, "{reply_len}");
}

/// The count a batch was refused for as over [`MAX_BATCH`](crate::api::limits::MAX_BATCH),
/// if that was the refusal.
fn refused_as_too_many(decoded: Result<BatchDecoded<'_>>) -> Option<usize> {
    match decoded {
        Err(error) => match error.field() {
            Some(("requests", Invalid::TooMany { count, .. })) => Some(*count),
            _ => None,
        },
        Ok(_) => None,
    }
}

/// An authorizer that records the object each `decide_content` call was given, refuses
/// unreadable content (`not json`) as the engine does, and otherwise answers as an engine with
/// no policy. `decide` must not be called: the handlers' requests may carry content.
struct SeesContent {
    engine: crate::engine::Engine,
    seen: std::sync::Mutex<Vec<Option<Vec<u8>>>>,
}

impl SeesContent {
    fn new() -> Self {
        let policy = crate::policy::model::PolicySet::default();
        Self {
            engine: crate::engine::Engine::new(&policy, crate::engine::EngineConfig::default()),
            seen: Default::default(),
        }
    }
}

impl Authorize for SeesContent {
    fn decide(&self, _: request::RequestRef<'_>) -> Decided {
        panic!("requests that may carry content are decided through decide_content")
    }

    fn decide_content(&self, request: request::RequestRef<'_>) -> Result<Decided, ContentError> {
        let object = request.content.and_then(|c| c.object.clone());
        let unreadable = object.as_deref() == Some(&b"not json"[..]);
        self.seen.lock().unwrap().push(object);
        if unreadable {
            return Err(ContentError {
                field: "content.object".into(),
                problem: "is not JSON".into(),
            });
        }
        Ok(self.engine.decide(request))
    }

    fn who_can(&self, _: &request::Action) -> crate::engine::AllowedSubjects {
        crate::engine::AllowedSubjects::default()
    }
}

/// Both forms of a decoded request reach the engine through `decide_content`: a view with no
/// content, prost's request with the content it carried; and the engine's refusal of
/// unreadable content comes back as it is.
#[test]
fn requests_reach_the_engine_with_their_content() {
    let authorizer = SeesContent::new();
    let decide = |bytes: Vec<u8>| -> std::result::Result<Decided, ContentError> {
        let call = AuthorizeCall::from(Bytes::from(bytes));
        let owned;
        let view;
        let input = match call.decode().unwrap() {
            Decoded::View(decoded) => {
                view = decoded;
                AuthorizeInput::Borrowed(&view)
            }
            Decoded::Owned(wire) => {
                owned = convert::authorize_request(wire, &ContentLimits::default()).unwrap();
                AuthorizeInput::Owned {
                    request: &owned.0,
                    content: owned.1.as_ref(),
                }
            }
        };
        authorizer.decide_content(input.as_request())
    };
    let plain = proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: "alice".into(),
            ..Default::default()
        }),
        action: healthz(),
        min_revision: 0,
        content: None,
        conditions_mode: 0,
    };
    let with = |object: &[u8]| proto::AuthorizeRequest {
        content: Some(proto::Content {
            object: object.to_vec(),
            ..Default::default()
        }),
        ..plain.clone()
    };
    let answered = decide(plain.encode_to_vec()).unwrap();
    assert_eq!(answered.response.decision, Decision::NoOpinion);
    decide(with(b"{\"a\":1}").encode_to_vec()).unwrap();
    let refused = decide(with(b"not json").encode_to_vec()).unwrap_err();
    assert_eq!(
        *authorizer.seen.lock().unwrap(),
        [
            None,
            Some(b"{\"a\":1}".to_vec()),
            Some(b"not json".to_vec())
        ]
    );
    assert_eq!(refused.field, "content.object");
    let status = Status::from(ApiError::from(refused));
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), "content.object: is not JSON");
}
