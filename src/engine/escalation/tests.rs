use super::*;
use crate::engine::EngineConfig;
use crate::policy::load::{load_sources, parse_manifest, LoadOptions};

/// Ann administers namespace `team`: the upstream `admin`-like role there, minus secrets by a
/// deny rule. Root is a super-user.
const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cluster-admin}
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
- {nonResourceURLs: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: ns-admin, namespace: team}
rules:
- {apiGroups: ["", "apps"], resources: ["*"], verbs: ["*"]}
# As upstream's `admin`: manage roles and bindings, but no `escalate` or `bind`.
- {apiGroups: ["rbac.authorization.k8s.io"], resources: ["roles", "rolebindings"], verbs: ["create", "update", "patch", "delete", "get", "list", "watch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: no-secrets, namespace: team}
rules:
- {apiGroups: [""], resources: ["secrets"], verbs: ["get"], deny: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ann-admin, namespace: team}
subjects: [{kind: User, name: ann}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ns-admin}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ann-no-secrets, namespace: team}
subjects: [{kind: User, name: ann}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: no-secrets}
"#;

fn setup(extra: &str) -> (PolicySet, Engine) {
    let text = format!("{POLICY}{extra}");
    let policy = load_sources(&[("p.yaml".into(), text)], &LoadOptions::default()).unwrap();
    let engine = Engine::new(
        &policy,
        EngineConfig {
            super_users: vec!["root".into()],
            ..Default::default()
        },
    );
    (policy, engine)
}

fn objects(text: &str) -> Vec<PolicyObject> {
    parse_manifest("manifest", text, &LoadOptions::default()).unwrap()
}

fn check(engine: &Engine, policy: &PolicySet, user: &str, manifest: &str) -> Result<(), String> {
    let caller = UserInfo {
        name: user.into(),
        ..Default::default()
    };
    EscalationCheck {
        engine,
        caller: &caller,
    }
    .check(policy, &objects(manifest))
}

const BIND_CLUSTER_ADMIN: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: steal, namespace: team}
subjects: [{kind: User, name: ann}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
"#;

#[test]
fn a_namespace_admin_cannot_bind_cluster_admin() {
    let (policy, engine) = setup("");
    let refusal = check(&engine, &policy, "ann", BIND_CLUSTER_ADMIN).unwrap_err();
    assert!(refusal.contains("RoleBinding \"steal/team\""), "{refusal}");
    assert!(refusal.contains("`*` on URL `*`"), "{refusal}");
    assert!(check(&engine, &policy, "root", BIND_CLUSTER_ADMIN).is_ok());
}

#[test]
fn a_role_within_ones_own_permissions_is_fine_and_a_broader_one_is_not() {
    let (policy, engine) = setup("");
    let narrow = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: team}
rules: [{apiGroups: [""], resources: ["pods"], verbs: ["get", "list"]}]
"#;
    assert_eq!(check(&engine, &policy, "ann", narrow), Ok(()));
    let broader = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: batch-all, namespace: team}
rules: [{apiGroups: ["batch"], resources: ["jobs"], verbs: ["create"]}]
"#;
    let refusal = check(&engine, &policy, "ann", broader).unwrap_err();
    assert!(
        refusal.contains("`create` on `jobs` (API group `batch`)"),
        "{refusal}"
    );
    // The same role in another namespace: Ann holds nothing there.
    let elsewhere = narrow.replace("namespace: team", "namespace: other");
    assert!(check(&engine, &policy, "ann", &elsewhere).is_err());
}

#[test]
fn nobody_can_grant_what_a_deny_rule_withholds() {
    let (policy, engine) = setup("");
    // Exactly the denied permission.
    let secrets = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secret-reader, namespace: team}
rules: [{apiGroups: [""], resources: ["secrets"], verbs: ["get"]}]
"#;
    let refusal = check(&engine, &policy, "ann", secrets).unwrap_err();
    assert!(refusal.contains("deny rule"), "{refusal}");
    // A wildcard that includes it, although Ann's allow covers `*` literally.
    let wildcard = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: core-all, namespace: team}
rules: [{apiGroups: [""], resources: ["*"], verbs: ["*"]}]
"#;
    let refusal = check(&engine, &policy, "ann", wildcard).unwrap_err();
    assert!(refusal.contains("`*` on `*`"), "{refusal}");
    // A grant that does not overlap the deny is fine.
    let pods = secrets
        .replace("secrets", "pods")
        .replace("secret-reader", "pod-getter");
    assert_eq!(check(&engine, &policy, "ann", &pods), Ok(()));
}

#[test]
fn bind_and_escalate_lift_the_check() {
    let extra = r#"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: binder, namespace: team}
rules:
- {apiGroups: ["rbac.authorization.k8s.io"], resources: ["clusterroles"], verbs: ["bind"], resourceNames: ["cluster-admin"]}
- {apiGroups: ["rbac.authorization.k8s.io"], resources: ["roles"], verbs: ["escalate"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-binder, namespace: team}
subjects: [{kind: User, name: bob}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: binder}
"#;
    let (policy, engine) = setup(extra);
    let bind_for_bob = BIND_CLUSTER_ADMIN.replace("name: ann", "name: bob");
    assert_eq!(check(&engine, &policy, "bob", &bind_for_bob), Ok(()));
    let broad_role = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: anything, namespace: team}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
"#;
    assert_eq!(check(&engine, &policy, "bob", broad_role), Ok(()));
    assert!(check(&engine, &policy, "ann", broad_role).is_err());
}

#[test]
fn aggregation_rules_need_full_authority() {
    let (policy, engine) = setup("");
    let aggregator = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gather}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {any: "true"}}]
rules: []
"#;
    let refusal = check(&engine, &policy, "ann", aggregator).unwrap_err();
    assert!(refusal.contains("aggregationRule"), "{refusal}");
    assert_eq!(check(&engine, &policy, "root", aggregator), Ok(()));
}

/// A holder's restricted rule covers only the identical restricted rule; an unrestricted
/// grant covers any restriction of it (docs/security.md §4).
#[test]
fn restricted_grants_cover_only_the_same_restriction() {
    let (policy, engine) = setup(
        r#"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: labeler, namespace: team}
rules:
- {apiGroups: ["apps"], resources: ["deployments"], verbs: ["update"], fields: [".metadata.labels"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-labeler, namespace: team}
subjects: [{kind: User, name: bot}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: labeler}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-roles, namespace: team}
subjects: [{kind: User, name: bot}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-writer}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: role-writer, namespace: team}
rules:
- {apiGroups: ["rbac.authorization.k8s.io"], resources: ["roles"], verbs: ["create"]}
"#,
    );
    let role = |rule: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: copy, namespace: team}}\nrules:\n- {rule}\n"
        )
    };
    let same = role(
        r#"{apiGroups: ["apps"], resources: ["deployments"], verbs: ["update"], fields: [".metadata.labels"]}"#,
    );
    assert_eq!(check(&engine, &policy, "bot", &same), Ok(()));
    let unrestricted =
        role(r#"{apiGroups: ["apps"], resources: ["deployments"], verbs: ["update"]}"#);
    let refusal = check(&engine, &policy, "bot", &unrestricted).unwrap_err();
    assert!(
        refusal.contains("only under content restrictions"),
        "{refusal}"
    );
    let other = role(
        r#"{apiGroups: ["apps"], resources: ["deployments"], verbs: ["update"], fields: [".spec"]}"#,
    );
    let refusal = check(&engine, &policy, "bot", &other).unwrap_err();
    assert!(
        refusal.contains("restricted to fields [.spec]"),
        "{refusal}"
    );
    // Ann holds `*` on apps unrestricted: any restriction of it is hers to grant.
    assert_eq!(check(&engine, &policy, "ann", &other), Ok(()));
}

/// A grant of `["*", "-delete"]` is not the literal verb `*`: it covers every verb but
/// `delete`, so a role granting `*` is refused (and one granting what is held passes).
#[test]
fn a_negated_wildcard_does_not_cover_the_wildcard() {
    let (policy, engine) = setup(
        r#"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: all-but-delete, namespace: team}
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: ["*", "-delete"]}
- {apiGroups: ["*"], resources: ["*", "-roles"], verbs: ["delete"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dora, namespace: team}
subjects: [{kind: User, name: dora}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: all-but-delete}
"#,
    );
    let role = |verbs: &str, resources: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: copy, namespace: team}}\nrules:\n- {{apiGroups: [\"*\"], resources: {resources}, verbs: {verbs}}}\n"
        )
    };
    // `*` stands for `delete` too, and she may not delete roles.
    let refusal = check(&engine, &policy, "dora", &role(r#"["*"]"#, r#"["*"]"#)).unwrap_err();
    assert!(
        refusal.contains("`*` on `*` (API group `*`), for example "),
        "{refusal}"
    );
    let refusal = check(&engine, &policy, "dora", &role(r#"["delete"]"#, r#"["*"]"#)).unwrap_err();
    assert!(
        refusal.contains("`delete` on `*` (API group `*`), for example `delete` on `roles`"),
        "{refusal}"
    );
    // A limited grant holds no privilege verb (docs/semantics.md §6): `*` on pods is more.
    let refusal = check(&engine, &policy, "dora", &role(r#"["*"]"#, r#"["pods"]"#)).unwrap_err();
    assert!(
        refusal.contains("`*` on `pods` (API group `*`), for example `bind` on `pods`"),
        "{refusal}"
    );
    // Exactly what she holds, spelled as she holds it or otherwise, she may grant.
    assert_eq!(
        check(
            &engine,
            &policy,
            "dora",
            &role(r#"["*", "-delete"]"#, r#"["*"]"#)
        ),
        Ok(())
    );
    assert_eq!(
        check(
            &engine,
            &policy,
            "dora",
            &role(r#"["*"]"#, r#"["*", "-roles"]"#)
        ),
        Ok(())
    );
    assert_eq!(
        check(
            &engine,
            &policy,
            "dora",
            &role(r#"["get", "delete"]"#, r#"["pods", "secrets"]"#)
        ),
        Ok(())
    );
    // Binding a role that grants `*` is binding `delete roles`, and more.
    let bind_admin = BIND_CLUSTER_ADMIN.replace("name: ann", "name: dora");
    assert!(check(&engine, &policy, "dora", &bind_admin).is_err());
}

/// The shipped policy (`policy/`): Hubert is project admin in `hammer` through seed 003's
/// `admin`, which withholds `create`, `update` and `delete` on roles. He may not bind
/// `cluster-admin` to himself there (which would give him exactly those), nor write a role
/// granting `*`; what `admin` holds he may grant.
#[test]
fn the_shipped_project_admin_cannot_make_himself_cluster_admin() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    let policy =
        crate::policy::load::load_paths(&[root], &LoadOptions::default()).expect("policy/ loads");
    let engine = Engine::new(&policy, EngineConfig::default());
    let bind = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: hubert-is-god, namespace: hammer}
subjects: [{kind: User, name: Hubert}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
"#;
    let refusal = check(&engine, &policy, "Hubert", bind).unwrap_err();
    assert!(
        refusal.starts_with(
            "RoleBinding \"hubert-is-god/hammer\": you cannot grant what you do not hold:"
        ),
        "{refusal}"
    );
    assert!(
        refusal.contains("`*` on `*` (API group `*`), for example `create` on "),
        "{refusal}"
    );
    let wildcard = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: everything, namespace: hammer}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
"#;
    assert!(check(&engine, &policy, "Hubert", wildcard).is_err());
    // Seed 003's own example: Hubert grants `edit` to Edgar, which `admin` covers.
    let edit_for_edgar = bind
        .replace("hubert-is-god", "Editors")
        .replace("name: Hubert", "name: Edgar")
        .replace("name: cluster-admin", "name: edit");
    assert_eq!(check(&engine, &policy, "Hubert", &edit_for_edgar), Ok(()));
    // admin's own rules, bound again in his namespace: his to grant.
    let bind_admin = bind
        .replace("hubert-is-god", "hubert-again")
        .replace("name: cluster-admin", "name: admin");
    assert_eq!(check(&engine, &policy, "Hubert", &bind_admin), Ok(()));
    // Edgar edits in `hammer` (`*` on every resource but roles and a few): binding
    // cluster-admin there would give him roles, and his limited grant holds no `bind`.
    let for_edgar = bind
        .replace("hubert-is-god", "edgar-is-god")
        .replace("name: Hubert", "name: Edgar");
    assert!(check(&engine, &policy, "Edgar", &for_edgar).is_err());
    // ...but not in a namespace where he holds nothing.
    assert!(check(
        &engine,
        &policy,
        "Hubert",
        &bind_admin.replace("hammer", "anvil")
    )
    .is_err());
}

/// `user` deleting the objects `manifest` names, as they are in `policy`.
fn check_delete(
    engine: &Engine,
    policy: &PolicySet,
    user: &str,
    manifest: &str,
) -> Result<(), String> {
    let caller = UserInfo {
        name: user.into(),
        ..Default::default()
    };
    let existing: Vec<PolicyObject> = objects(manifest)
        .iter()
        .map(|object| {
            let key = crate::store::ObjectRef::of(object);
            crate::store::find_object(policy, &key)
                .expect("the object exists")
                .to_object()
        })
        .collect();
    EscalationCheck {
        engine,
        caller: &caller,
    }
    .check_delete(policy, &existing)
}

const NO_SECRETS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: no-secrets, namespace: team}
rules:
- {apiGroups: [""], resources: ["configmaps"], verbs: ["get"], deny: true}
"#;

fn ann_no_secrets_for(subjects: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata: {{name: ann-no-secrets, namespace: team}}\nsubjects: {subjects}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: no-secrets}}\n"
    )
}

#[test]
fn a_deny_rule_withholding_from_its_author_cannot_be_lifted_by_her() {
    let (policy, engine) = setup("");
    // Deleting the role that denies her secrets, or her binding to it.
    for deleted in [NO_SECRETS, &ann_no_secrets_for("[]")] {
        let refusal = check_delete(&engine, &policy, "ann", deleted).unwrap_err();
        assert!(
            refusal.contains("you cannot lift a deny rule")
                && refusal.contains("`get` on `secrets`"),
            "{refusal}"
        );
    }
    // Replacing the role without the deny on secrets (another deny in its place).
    let refusal = check(&engine, &policy, "ann", NO_SECRETS).unwrap_err();
    assert!(
        refusal.starts_with("Role \"no-secrets/team\": you cannot lift"),
        "{refusal}"
    );
    // Dropping herself from the binding; adding someone beside her only denies more.
    let bob_only = ann_no_secrets_for("[{kind: User, name: bob}]");
    let refusal = check(&engine, &policy, "ann", &bob_only).unwrap_err();
    assert!(
        refusal.contains("RoleBinding \"ann-no-secrets/team\""),
        "{refusal}"
    );
    let both = ann_no_secrets_for("[{kind: User, name: ann}, {kind: User, name: bob}]");
    assert_eq!(check(&engine, &policy, "ann", &both), Ok(()));
    // A super-user may.
    assert_eq!(check_delete(&engine, &policy, "root", NO_SECRETS), Ok(()));
}

#[test]
fn a_deny_rule_withholding_what_its_author_holds_may_be_lifted() {
    let bob_no_pods = r#"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: no-pods, namespace: team}
rules:
- {apiGroups: [""], resources: ["pods"], verbs: ["delete"], deny: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-no-pods, namespace: team}
subjects: [{kind: User, name: bob}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: no-pods}
"#;
    let (policy, engine) = setup(bob_no_pods);
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
                metadata: {name: no-pods, namespace: team}\nrules: []\n";
    assert_eq!(check_delete(&engine, &policy, "ann", role), Ok(()));
    assert_eq!(check(&engine, &policy, "ann", role), Ok(()));
    // A deny role no binding reaches lifts nothing: ann's deny on secrets, unbound.
    let unbound = r#"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: no-secrets-unbound, namespace: team}
rules:
- {apiGroups: [""], resources: ["secrets"], verbs: ["get"], deny: true}
"#;
    let (policy, engine) = setup(unbound);
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
                metadata: {name: no-secrets-unbound, namespace: team}\nrules: []\n";
    assert_eq!(check_delete(&engine, &policy, "ann", role), Ok(()));
}

/// A deny rule can reach a binding through ClusterRole aggregation: deleting the binding lifts
/// it as deleting a binding of the role that holds it would.
#[test]
fn a_deny_rule_gathered_by_aggregation_is_lifted_by_deleting_its_binding() {
    let gathered = r#"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gathered-denies}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {denies: "true"}}]
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: no-secrets-anywhere, labels: {denies: "true"}}
rules:
- {apiGroups: [""], resources: ["secrets"], verbs: ["list"], deny: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ann-gathered, namespace: team}
subjects: [{kind: User, name: ann}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gathered-denies}
"#;
    let (policy, engine) = setup(gathered);
    let binding = "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
                   metadata: {name: ann-gathered, namespace: team}\nsubjects: []\n\
                   roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, \
                   name: gathered-denies}\n";
    let refusal = check_delete(&engine, &policy, "ann", binding).unwrap_err();
    assert!(
        refusal.contains("you cannot lift a deny rule") && refusal.contains("`list` on `secrets`"),
        "{refusal}"
    );
}
