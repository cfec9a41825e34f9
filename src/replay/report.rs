//! What `authzd replay` prints: the flipped requests, most frequent first, as text (`+` a
//! gain, `-` a loss, like `authzd diff`) or as JSON for tools; and which gates fired.

use serde_json::{json, Value};

use super::{gate_matches, Flip, FlipKey, Replayed};
use crate::records::format::action_value;
use crate::request::Action;

/// The flips in report order: most records first, then by request.
pub fn ordered(replayed: &Replayed) -> Vec<(&FlipKey, &Flip)> {
    let mut flips: Vec<_> = replayed.flips.iter().collect();
    flips.sort_by(|(ka, a), (kb, b)| b.count.cmp(&a.count).then_with(|| ka.cmp(kb)));
    flips
}

/// `get pods/log web` / `list apps/deployments` / `get /healthz`.
pub fn action_text(action: &Action) -> String {
    match action {
        Action::Resource(crate::request::ResourceAttributes {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        }) => {
            let mut text = format!("{verb} ");
            if !group.is_empty() {
                text.push_str(group);
                text.push('/');
            }
            text.push_str(resource);
            if !subresource.is_empty() {
                text.push('/');
                text.push_str(subresource);
            }
            if !name.is_empty() {
                text.push(' ');
                text.push_str(name);
            }
            text
        }
        Action::NonResource(n) => format!("{} {}", n.verb, n.path),
    }
}

/// `in NS`, `cluster-wide`, or empty for a URL.
pub fn scope_text(action: &Action) -> String {
    match action {
        Action::Resource(r) if r.namespace.is_empty() => "cluster-wide".into(),
        Action::Resource(r) => format!("in {}", r.namespace),
        Action::NonResource(_) => String::new(),
    }
}

fn subject_text(key: &FlipKey) -> String {
    if key.groups.is_empty() {
        key.user.clone()
    } else {
        format!("{} ({})", key.user, key.groups.join(", "))
    }
}

fn from_text(flip: &Flip) -> String {
    flip.from
        .iter()
        .map(|(decision, count)| {
            if flip.from.len() == 1 {
                decision.to_string()
            } else {
                format!("{decision} ×{count}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn callers_text(flip: &Flip) -> String {
    let mut text = flip.callers.iter().cloned().collect::<Vec<_>>().join(", ");
    if flip.more_callers {
        text.push_str(", ...");
    }
    text
}

/// The human report.
pub fn text(replayed: &Replayed) -> String {
    let mut out = String::new();
    let lost: u64 = replayed.gaps.values().sum();
    out.push_str(&format!(
        "replayed {} records from {} file{}{}; old answers {}\n",
        replayed.records,
        replayed.files,
        if replayed.files == 1 { "" } else { "s" },
        if lost > 0 {
            format!(" ({lost} not recorded: gaps in the stream)")
        } else {
            String::new()
        },
        if replayed.old_policy {
            "from --policy"
        } else {
            "as recorded"
        },
    ));
    out.push_str(&format!(
        "{} flipped: {} gain access, {} lose it, {} distinct requests\n",
        replayed.flipped(),
        replayed.flipped_to(true),
        replayed.flipped_to(false),
        replayed.flips.len()
    ));
    if replayed.changed_not_flipped > 0 {
        out.push_str(&format!(
            "{} change between deny and no opinion (refused either way)\n",
            replayed.changed_not_flipped
        ));
    }
    if replayed.refused > 0 {
        out.push_str(&format!(
            "{} would be refused: their content is unreadable to a rule that reads it\n",
            replayed.refused
        ));
    }
    for (key, flip) in ordered(replayed) {
        let scope = scope_text(&key.action);
        out.push_str(&format!(
            "{} {}  {}{}  ×{}  {} -> {}  callers: {}\n",
            if key.gain { '+' } else { '-' },
            subject_text(key),
            action_text(&key.action),
            if scope.is_empty() {
                String::new()
            } else {
                format!(" {scope}")
            },
            flip.count,
            from_text(flip),
            flip.to,
            callers_text(flip),
        ));
    }
    out
}

/// The report for tools: the totals and every flipped request.
pub fn json(replayed: &Replayed) -> Value {
    let flips: Vec<Value> = ordered(replayed)
        .into_iter()
        .map(|(key, flip)| {
            let mut entry = json!({
                "direction": if key.gain { "gain" } else { "loss" },
                "user": key.user,
                "groups": key.groups,
                "count": flip.count,
                "from": flip.from,
                "to": flip.to,
                "callers": flip.callers,
                "more_callers": flip.more_callers,
                "first_seq": flip.first_seq,
            });
            if let (Value::Object(entry), Value::Object(action)) =
                (&mut entry, action_value(&key.action))
            {
                entry.extend(action);
            }
            entry
        })
        .collect();
    json!({
        "records": replayed.records,
        "files": replayed.files,
        "gaps": replayed.gaps,
        "old_answers": if replayed.old_policy { "policy" } else { "recorded" },
        "flipped": replayed.flipped(),
        "gains": replayed.flipped_to(true),
        "losses": replayed.flipped_to(false),
        "changed_not_flipped": replayed.changed_not_flipped,
        "refused": replayed.refused,
        "flips": flips,
    })
}

/// The gates that fire, one line each: `--fail-on-gain PATTERN: alice gains get secrets in
/// dev (×3)`.
pub fn fired_gates(
    replayed: &Replayed,
    fail_on_gain: &[String],
    fail_on_loss: &[String],
) -> Vec<String> {
    let mut fired = Vec::new();
    for (key, flip) in ordered(replayed) {
        let gates = if key.gain { fail_on_gain } else { fail_on_loss };
        for gate in gates {
            if gate_matches(gate, &key.user, &key.groups) {
                fired.push(format!(
                    "--fail-on-{} {gate}: {} {} {} {} (×{})",
                    if key.gain { "gain" } else { "loss" },
                    subject_text(key),
                    if key.gain { "gains" } else { "loses" },
                    action_text(&key.action),
                    scope_text(&key.action),
                    flip.count
                ));
            }
        }
    }
    fired
}
