//! The hand-written fast path (`api::wire`) pinned to the compiled contract.
//!
//! The view reader and the reply encoder know the contract's messages by field number, from the
//! tables in `api::wire::fields`; the manual `authz.v1.Authorizer` server that `build.rs`
//! generates knows its methods from `api::wire::routes`. Neither is generated from
//! `proto/authz/v1/authz.proto`, so these tests hold both to the descriptor set compiled from
//! it: a field or method added, removed, renumbered or renamed in the proto fails here, naming
//! the message and the field, instead of being dropped (or never answered) on the fast path.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::{BTreeMap, BTreeSet};

use authzd::api::wire::{fields, routes};
use prost::Message;
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet, ServiceDescriptorProto};

fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(authzd::proto::FILE_DESCRIPTOR_SET).unwrap()
}

/// Every message of the set by full name (`authz.v1.UserInfo`, nested ones included, such as
/// the map entry `authz.v1.UserInfo.ExtraEntry`).
fn messages(set: &FileDescriptorSet) -> BTreeMap<String, &DescriptorProto> {
    fn add<'a>(
        prefix: &str,
        message: &'a DescriptorProto,
        into: &mut BTreeMap<String, &'a DescriptorProto>,
    ) {
        let name = format!("{prefix}.{}", message.name());
        for nested in &message.nested_type {
            add(&name, nested, into);
        }
        into.insert(name, message);
    }
    let mut all = BTreeMap::new();
    for file in &set.file {
        for message in &file.message_type {
            add(file.package(), message, &mut all);
        }
    }
    all
}

fn service<'a>(
    set: &'a FileDescriptorSet,
    package: &str,
    name: &str,
) -> &'a ServiceDescriptorProto {
    set.file
        .iter()
        .filter(|file| file.package() == package)
        .flat_map(|file| &file.service)
        .find(|service| service.name() == name)
        .unwrap_or_else(|| panic!("no service {package}.{name} in the descriptor set"))
}

/// A type name of the descriptor (`.authz.v1.UserInfo`) as the tables write it, without the dot.
fn type_name(name: &str) -> &str {
    name.strip_prefix('.').unwrap_or(name)
}

/// What differs between the fields the wire module declares for `table` and the proto's
/// message of that name, one line per field.
fn differences(
    table: &fields::Message,
    messages: &BTreeMap<String, &DescriptorProto>,
    role: &str,
) -> Vec<String> {
    let Some(message) = messages.get(table.name) else {
        return vec![format!(
            "{}: {role} by api::wire, but not a message of the descriptor set",
            table.name
        )];
    };
    let proto: BTreeSet<(u32, &str)> = message
        .field
        .iter()
        .map(|field| (u32::try_from(field.number()).unwrap(), field.name()))
        .collect();
    let known: BTreeSet<(u32, &str)> = table.fields.iter().copied().collect();
    let mut problems = Vec::new();
    if known.len() != table.fields.len() {
        problems.push(format!(
            "{}: api::wire::fields lists a field twice: {:?}",
            table.name, table.fields
        ));
    }
    for (number, name) in proto.difference(&known) {
        problems.push(format!(
            "{}: field `{name}` = {number} is in the proto but not in api::wire::fields \
             (the message is {role} by hand in src/api/wire.rs: teach it the field, then \
             add it to the table)",
            table.name
        ));
    }
    for (number, name) in known.difference(&proto) {
        problems.push(format!(
            "{}: api::wire::fields has field `{name}` = {number}, which the proto's message \
             does not (removed, renamed or renumbered?)",
            table.name
        ));
    }
    problems
}

/// The field tables of the view reader and of the encoder are exactly the proto's fields, by
/// number and name.
#[test]
fn the_wire_field_tables_match_the_proto() {
    let set = descriptor_set();
    let messages = messages(&set);
    let mut problems = Vec::new();
    for table in fields::READ {
        problems.extend(differences(table, &messages, "read"));
    }
    for table in fields::WRITTEN {
        problems.extend(differences(table, &messages, "written"));
    }
    assert!(
        problems.is_empty(),
        "the wire fast path and proto/authz/v1/authz.proto disagree:\n{}",
        problems.join("\n")
    );
}

/// Fields whose messages the view never reads: a request with `extra` is decoded by prost
/// (`read_user`), so `ExtraEntry` and `ExtraValues` need no table; nor does a request carrying
/// content or selectors (`read_authorize_from`, `read_resource`), so `Content`,
/// `FieldSelectorAttributes`, `LabelSelectorAttributes` and `SelectorRequirement` need none.
const LEFT_TO_PROST: &[(&str, &str)] = &[
    ("authz.v1.UserInfo", "extra"),
    ("authz.v1.AuthorizeRequest", "content"),
    ("authz.v1.ResourceAttributes", "field_selector"),
    ("authz.v1.ResourceAttributes", "label_selector"),
];

/// The messages reachable from `root` through message-typed fields, `root` included.
fn reachable(root: &str, messages: &BTreeMap<String, &DescriptorProto>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(message) = messages.get(&name) else {
            continue;
        };
        for field in &message.field {
            if field.r#type() == Type::Message
                && !LEFT_TO_PROST.contains(&(name.as_str(), field.name()))
            {
                todo.push(type_name(field.type_name()).to_owned());
            }
        }
    }
    seen
}

/// The tables cover every message the hand-written routes read and write: each message
/// reachable from a wire route's request has a reader table, from its answer an encoder
/// table, and no table is for a message the routes do not carry.
#[test]
fn the_wire_field_tables_cover_every_message_of_the_wire_routes() {
    let set = descriptor_set();
    let messages = messages(&set);
    let (mut read, mut written) = (BTreeSet::new(), BTreeSet::new());
    let wire_routes = routes::AUTHORIZER_ROUTES
        .iter()
        .filter(|route| route.input_type.starts_with("crate::api::wire::"));
    for route in wire_routes {
        read.extend(reachable(route.input_message, &messages));
        written.extend(reachable(route.output_message, &messages));
    }
    let names = |tables: &[fields::Message]| -> BTreeSet<String> {
        tables.iter().map(|t| t.name.to_owned()).collect()
    };
    let mut problems = Vec::new();
    for (role, carried, tables) in [
        ("read", &read, names(fields::READ)),
        ("written", &written, names(fields::WRITTEN)),
    ] {
        for missing in carried.difference(&tables) {
            problems.push(format!(
                "{missing}: {role} on the wire routes, but has no table in api::wire::fields"
            ));
        }
        for stale in tables.difference(carried) {
            problems.push(format!(
                "{stale}: api::wire::fields has it as {role}, but no wire route carries it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The routes `build.rs` declares for the manual server are the service's methods in the
/// proto, with their request and answer messages and whether each side streams; and a route
/// served with prost's types uses the types generated for its messages.
#[test]
fn the_manual_routes_are_the_services_methods() {
    let set = descriptor_set();
    let service = service(&set, routes::AUTHORIZER_PACKAGE, routes::AUTHORIZER_SERVICE);
    type Shape<'a> = (&'a str, &'a str, &'a str, (bool, bool));
    let proto: BTreeSet<Shape<'_>> = service
        .method
        .iter()
        .map(|m| {
            (
                m.name(),
                type_name(m.input_type()),
                type_name(m.output_type()),
                (m.client_streaming(), m.server_streaming()),
            )
        })
        .collect();
    let declared: BTreeSet<Shape<'_>> = routes::AUTHORIZER_ROUTES
        .iter()
        .map(|r| {
            (
                r.route,
                r.input_message,
                r.output_message,
                (r.client_streaming, r.server_streaming),
            )
        })
        .collect();
    let mut problems = Vec::new();
    for (method, input, output, streams) in proto.difference(&declared) {
        problems.push(format!(
            "authz.v1.Authorizer: rpc {method}({input}) returns ({output}) (streaming \
             {streams:?}) is in the proto but not declared so in src/api/wire/routes.rs \
             (build.rs's manual server)"
        ));
    }
    for (method, input, output, streams) in declared.difference(&proto) {
        problems.push(format!(
            "authz.v1.Authorizer: src/api/wire/routes.rs declares {method}({input}) -> \
             {output} (streaming {streams:?}), which the proto's service does not have"
        ));
    }
    for route in routes::AUTHORIZER_ROUTES {
        for (rust, message) in [
            (route.input_type, route.input_message),
            (route.output_type, route.output_message),
        ] {
            let short = message.rsplit('.').next().unwrap_or(message);
            let generated = format!("crate::proto::{short}");
            if !rust.starts_with("crate::api::wire::") && rust != generated {
                problems.push(format!(
                    "authz.v1.Authorizer/{}: serves {message} as {rust}, not {generated}",
                    route.route
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
