#!/usr/bin/env python3
"""A real gRPC client that knows authzd only through server reflection.

It has no generated code and no .proto file: it lists the services, builds the message classes
from descriptors fetched over grpc.reflection.v1alpha (the only version grpcio-reflection
speaks), and calls Authorize and GetAllowedSubjects against the sample policy
(tests/fixtures/sample/). Usage: reflection_client.py HOST:PORT. Exits non-zero on any failed check.
"""

import json
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        raise AssertionError(what)
    CHECKS += 1


class Reflected:
    """Callables for one service, built from reflected descriptors."""

    def __init__(self, channel, pool, service_name):
        self.service = pool.FindServiceByName(service_name)
        self.channel = channel

    def method(self, name):
        method = self.service.FindMethodByName(name)
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        call = self.channel.unary_unary(
            f"/{self.service.full_name}/{name}",
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        return request_class, call


def enum_name(message, field):
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    return enum.values_by_number[getattr(message, field)].name


def main(address):
    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=30)

    reflection = ProtoReflectionDescriptorDatabase(channel)
    services = set(reflection.get_services())
    for name in (
        "authz.v1.Authorizer",
        "authz.v1.AccessReview",
        "authz.v1.PolicyAdmin",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "envoy.service.auth.v3.Authorization",
    ):
        check(name in services, f"reflection lists {name}: {sorted(services)}")

    pool = descriptor_pool.DescriptorPool(reflection)
    authorizer = Reflected(channel, pool, "authz.v1.Authorizer")

    AuthorizeRequest, authorize = authorizer.method("Authorize")

    def ask(user, groups, namespace, verb, resource):
        request = AuthorizeRequest()
        request.user.name = user
        request.user.groups.extend(groups)
        attrs = request.action.resource_attributes
        attrs.namespace, attrs.verb, attrs.resource = namespace, verb, resource
        return authorize(request, timeout=10)

    allow = ask("alice", [], "default", "get", "pods")
    check(enum_name(allow, "decision") == "DECISION_ALLOW", f"alice may get pods: {allow}")
    check(allow.allowed and not allow.denied, "allowed flags")
    check(allow.revision >= 1, "a revision")
    check(
        [r.binding for r in allow.allowed_by] == ["ClusterRoleBinding/read-pods"],
        f"allowed_by names the binding: {allow.allowed_by}",
    )

    deny = ask("ivan", ["devs", "interns"], "dev", "get", "secrets")
    check(enum_name(deny, "decision") == "DECISION_DENY", f"ivan is denied secrets: {deny}")
    check(deny.denied_by[0].role == "Role/dev/no-secrets", "denied_by names the deny role")

    none = ask("mallory", [], "default", "delete", "pods")
    check(enum_name(none, "decision") == "DECISION_NO_OPINION", f"no opinion: {none}")

    no_action = AuthorizeRequest()
    no_action.user.name = "alice"
    try:
        authorize(no_action, timeout=10)
        check(False, "a request without an action is refused")
    except grpc.RpcError as error:
        check(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code: {error.code()}")
        check(error.details().startswith("action: "), f"names the field: {error.details()}")

    # Content (docs/policy.md §4): labelbot may change a Deployment's labels and nothing else; the
    # objects travel as JSON bytes in `content`, a message learnt from reflection like the rest.
    def update_deployment(old, new):
        request = AuthorizeRequest()
        request.user.name = "labelbot"
        attrs = request.action.resource_attributes
        attrs.namespace, attrs.verb, attrs.group, attrs.resource = "dev", "update", "apps", "deployments"
        request.content.old_object = json.dumps(old).encode()
        request.content.object = json.dumps(new).encode()
        return authorize(request, timeout=10)

    old = {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {"replicas": 1}}
    relabel = {"metadata": {"name": "web", "labels": {"app": "web", "tier": "1"}}, "spec": {"replicas": 1}}
    rescale = {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {"replicas": 3}}
    labels = update_deployment(old, relabel)
    check(enum_name(labels, "decision") == "DECISION_ALLOW", f"labelbot may relabel: {labels}")
    scale = update_deployment(old, rescale)
    check(enum_name(scale, "decision") == "DECISION_NO_OPINION", f"labelbot may not rescale: {scale}")
    check(".spec.replicas" in scale.reason, f"the reason names the path: {scale.reason}")

    GetAllowedSubjectsRequest, who_can = authorizer.method("GetAllowedSubjects")
    request = GetAllowedSubjectsRequest()
    attrs = request.action.resource_attributes
    attrs.namespace, attrs.verb, attrs.resource = "dev", "get", "secrets"
    subjects = who_can(request, timeout=10)
    check("devs" in subjects.groups, f"devs may get secrets: {subjects}")
    check(list(subjects.denied_groups) == ["interns"], f"interns are denied: {subjects}")

    # Envoy's ext_authz Check, with descriptors (envoy, xds, validate, google.rpc imports) from
    # reflection too. The server runs with the template
    # /api/v1/namespaces/{namespace}/{resource}/{name} (tests/e2e/reflection.rs).
    envoy = Reflected(channel, pool, "envoy.service.auth.v3.Authorization")
    CheckRequest, envoy_check = envoy.method("Check")

    def ext_authz(method, path, headers):
        request = CheckRequest()
        http = request.attributes.request.http
        http.method, http.path = method, path
        for key, value in headers.items():
            http.headers[key] = value
        return envoy_check(request, timeout=10)

    ok = ext_authz("GET", "/api/v1/namespaces/dev/pods/web", {"x-remote-user": "alice"})
    check(ok.status.code == 0 and ok.HasField("ok_response"), f"alice may get pods: {ok}")
    watch = ext_authz("GET", "/api/v1/namespaces/dev/pods/web?watch=true", {"x-remote-user": "alice"})
    check(watch.status.code == 0, f"a named GET is get, whatever ?watch says: {watch}")
    denied = ext_authz("DELETE", "/api/v1/namespaces/dev/pods/web", {"x-remote-user": "alice"})
    check(denied.status.code == 7, f"PERMISSION_DENIED: {denied}")
    check(denied.denied_response.status.code == 403, f"HTTP 403: {denied}")
    reasons = [h.header.value for h in denied.denied_response.headers if h.header.key == "x-authzd-reason"]
    check(
        len(reasons) == 1 and 'cannot delete resource "pods"' in reasons[0],
        f"the reason names the verb the DELETE maps to: {reasons}",
    )
    nobody = ext_authz("GET", "/api/v1/namespaces/dev/pods/web", {})
    check(nobody.status.code == 16 and nobody.denied_response.status.code == 401, f"no subject: {nobody}")

    print(f"e2e reflection client: {CHECKS} checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: reflection_client.py HOST:PORT")
    main(sys.argv[1])
