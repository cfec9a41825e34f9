//! etcd mode's applier (`Store::apply_changes`): it edits a spare copy of the policy in place
//! instead of copying the policy for every change, and finds a changed role's bindings through
//! an index instead of scanning every binding. Neither may change what it publishes: after any
//! sequence of change batches — with readers holding the published policy across some of them,
//! so that both the in-place edit and the copy are taken — the store holds and publishes
//! exactly the policy the changes make, in canonical order, with exactly the impact the
//! scanning analysis computes for the same change. Relists (`Store::replace`) in between drop
//! and rebuild what the applier keeps.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::support::generators::*;
use authzd::policy::delta::ChangedObject;
use authzd::policy::impact::{impact_of_change, impact_of_objects, Impact};
use authzd::policy::load::{parse_manifest, LoadOptions};
use authzd::policy::model::{Binding, PolicyObject, PolicySet, Role};
use authzd::store::{ChangeCause, FeedOnly, ObjectRef, Publisher, Store};
use proptest::prelude::*;
use proptest::sample::Index;

/// Records every publish: the policy and the impact.
#[derive(Default)]
struct Recorder {
    published: Mutex<Vec<(PolicySet, Impact)>>,
}

impl Publisher for Recorder {
    fn publish(
        &self,
        policy: &PolicySet,
        _: u64,
        impact: &Impact,
        _: ChangeCause,
        _: Option<&[ChangedObject]>,
    ) {
        self.published
            .lock()
            .unwrap()
            .push((policy.clone(), impact.clone()));
    }
}

#[derive(Clone, Debug)]
enum Edit {
    PutRole(Role),
    PutBinding(Binding),
    /// A FieldPolicy, as a manifest.
    PutFieldPolicy(PolicyObject),
    /// Deletes the role or binding at this index of all objects (if any).
    Delete(Index),
}

#[derive(Clone, Debug)]
enum Step {
    /// One revision's changes; whether a reader takes the published policy before them and
    /// holds it until after the next change (when the applier would edit it in place).
    Change { edits: Vec<Edit>, held: bool },
    /// A relist: the policy replaced whole.
    Relist(PolicySet),
}

fn step() -> impl Strategy<Value = Step> {
    let edit = prop_oneof![
        role().prop_map(Edit::PutRole),
        binding().prop_map(Edit::PutBinding),
        field_policy().prop_map(Edit::PutFieldPolicy),
        any::<Index>().prop_map(Edit::Delete),
    ];
    prop_oneof![
        10 => (proptest::collection::vec(edit, 1..=3), any::<bool>())
            .prop_map(|(edits, held)| Step::Change { edits, held }),
        1 => policy().prop_map(Step::Relist),
    ]
}

/// A FieldPolicy of two names, which may protect a path and may ignore one: changes that
/// do and do not change the protected paths.
fn field_policy() -> impl Strategy<Value = PolicyObject> {
    (
        prop_oneof![Just("a"), Just("b")],
        prop_oneof![Just(None), Just(Some(".data")), Just(Some(".metadata.finalizers"))],
        any::<bool>(),
    )
        .prop_map(|(name, protected, ignore)| {
            let mut text = format!(
                "apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            );
            if let Some(path) = protected {
                text.push_str(&format!("  protected: [\"{path}\"]\n"));
            }
            if ignore {
                text.push_str("  ignore: [\".status\"]\n");
            }
            if protected.is_none() && !ignore {
                text = text.replace("spec:\n", "spec: {}\n");
            }
            let mut objects =
                parse_manifest("fp.yaml", &text, &LoadOptions::default()).unwrap();
            objects.pop().unwrap()
        })
}

/// The model: every object by its key.
fn objects_of(policy: &PolicySet) -> BTreeMap<ObjectRef, PolicyObject> {
    let roles = policy
        .roles
        .iter()
        .map(|r| PolicyObject::Role(Role::clone(r)));
    let bindings = policy
        .bindings
        .iter()
        .map(|b| PolicyObject::Binding(Binding::clone(b)));
    let field_policies = policy
        .field_policies
        .iter()
        .map(|f| PolicyObject::FieldPolicy(f.clone()));
    roles
        .chain(bindings)
        .chain(field_policies)
        .map(|o| (ObjectRef::of(&o), o))
        .collect()
}

fn policy_of(objects: &BTreeMap<ObjectRef, PolicyObject>) -> PolicySet {
    let mut policy = PolicySet::default();
    for object in objects.values() {
        policy.push(object.clone());
    }
    policy.canonicalize();
    policy
}

fn run(initial: PolicySet, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let mut model = objects_of(&initial);
        let recorder = Arc::new(Recorder::default());
        let store = Store::open(
            Arc::new(FeedOnly),
            policy_of(&model),
            1,
            Arc::clone(&recorder) as Arc<dyn Publisher>,
        );
        let mut revision = 1;
        // A reader's policy, and what it held when taken.
        let mut reader: Option<(Arc<PolicySet>, PolicySet)> = None;
        for step in steps {
            revision += 1;
            let before = policy_of(&model);
            let previous_reader = reader.take();
            let (roles, bindings) = match step {
                Step::Relist(policy) => {
                    model = objects_of(&policy);
                    store.replace(policy_of(&model), revision).await;
                    let published = recorder.published.lock().unwrap().last().cloned();
                    let after = policy_of(&model);
                    prop_assert_eq!(
                        published.map(|(_, impact)| impact),
                        Some(impact_of_change(&before, &after))
                    );
                    continue;
                }
                Step::Change { edits, held } => {
                    // One revision names each key at most once, as etcd's watch does.
                    let mut change: BTreeMap<ObjectRef, Option<PolicyObject>> = BTreeMap::new();
                    for edit in edits {
                        match edit {
                            Edit::PutRole(role) => {
                                let object = PolicyObject::Role(role);
                                change.insert(ObjectRef::of(&object), Some(object));
                            }
                            Edit::PutBinding(binding) => {
                                let object = PolicyObject::Binding(binding);
                                change.insert(ObjectRef::of(&object), Some(object));
                            }
                            Edit::PutFieldPolicy(object) => {
                                change.insert(ObjectRef::of(&object), Some(object));
                            }
                            Edit::Delete(index) if !model.is_empty() => {
                                let key = model.keys().nth(index.index(model.len())).unwrap();
                                change.insert(key.clone(), None);
                            }
                            Edit::Delete(_) => {}
                        }
                    }
                    let mut roles = Vec::new();
                    let mut bindings = Vec::new();
                    for (key, state) in &change {
                        let old = model.get(key).cloned();
                        match state {
                            Some(object) => model.insert(key.clone(), object.clone()),
                            None => model.remove(key),
                        };
                        let new = state.clone();
                        let role = |o: Option<PolicyObject>| match o {
                            Some(PolicyObject::Role(r)) => Some(r),
                            _ => None,
                        };
                        let binding = |o: Option<PolicyObject>| match o {
                            Some(PolicyObject::Binding(b)) => Some(b),
                            _ => None,
                        };
                        let (old_role, new_role) = (role(old.clone()), role(new.clone()));
                        if old_role.is_some() || new_role.is_some() {
                            roles.push((old_role, new_role));
                        }
                        let (old_binding, new_binding) = (binding(old), binding(new));
                        if old_binding.is_some() || new_binding.is_some() {
                            bindings.push((old_binding, new_binding));
                        }
                    }
                    if held {
                        reader = Some((store.policy(), before.clone()));
                    }
                    store
                        .apply_changes(revision, change.into_iter().collect())
                        .await;
                    (roles, bindings)
                }
            };
            let after = policy_of(&model);
            prop_assert_eq!(&*store.policy(), &after);
            prop_assert_eq!(store.revision(), revision);
            let (published, impact) = recorder.published.lock().unwrap().last().cloned().unwrap();
            prop_assert_eq!(&published, &after);
            let role_refs: Vec<(Option<&Role>, Option<&Role>)> = roles
                .iter()
                .map(|(a, b)| (a.as_ref(), b.as_ref()))
                .collect();
            let binding_refs: Vec<(Option<&Binding>, Option<&Binding>)> = bindings
                .iter()
                .map(|(a, b)| (a.as_ref(), b.as_ref()))
                .collect();
            // Protected paths decide which plain allows need content: changing them may
            // change any cached answer. Nothing else of a FieldPolicy is cached.
            let protected_changed = !before.protected_paths().eq(after.protected_paths());
            let expected = if protected_changed {
                Impact::everything()
            } else {
                impact_of_objects(&after, &before, &role_refs, &binding_refs)
            };
            prop_assert_eq!(impact, expected);
            // What a reader held is untouched by the edits since.
            if let Some((held, as_taken)) = previous_reader {
                prop_assert_eq!(&*held, &as_taken);
            }
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(crate::support::cases::config(500))]

    #[test]
    fn applied_changes_publish_the_policy_and_impact_of_a_scan(
        initial in policy(),
        steps in proptest::collection::vec(step(), 1..=12),
    ) {
        run(initial, steps)?;
    }
}
