//! docs/config.md is the config's reference, and this test keeps it true: every key the
//! config types accept has a row under its section's heading there, and every row names a
//! key they accept.
//!
//! The keys come from the code, not from a list kept beside it: each section is parsed
//! with one key no type knows, `__probe__`, and serde's refusal ("unknown field
//! `__probe__`, expected one of `a`, `b`, ...") names every key the section's type takes.
//! Each of those keys is probed in turn, as a table and as an array of tables, to find the
//! sections nested in it. This relies on `#[serde(deny_unknown_fields)]`, which every
//! struct of the config and of the location graph file has: a struct that lost it would
//! swallow the probe, its section would disappear from what the code accepts, and its rows
//! in the page would fail here as keys nothing accepts.
//!
//! The page's format: a section is a heading whose whole text is one code span
//! (`` ## `[geo]` ``, `` ### `[[service]].health` ``, `` ## `(top level)` ``), and a key
//! is a table row under it that starts with a code span (`` | `database` | ... ``).
//! Headings of any other form end a section (their tables are not keys).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::config::Config;

const PROBE: &str = "__probe__";

/// One step from the top of a file to a section: a key holding a table (`key = { }`) or
/// an array of tables (`key = [{ }]`).
#[derive(Clone)]
struct Step {
    key: String,
    array: bool,
}

/// A document whose only key, at the end of `path`, is the probe (inline tables all the
/// way, so one line).
fn probe_document(path: &[Step]) -> String {
    let mut body = format!("{PROBE} = 1");
    for step in path.iter().rev() {
        body = if step.array {
            format!("{} = [{{ {body} }}]", step.key)
        } else {
            format!("{} = {{ {body} }}", step.key)
        };
    }
    body
}

/// The keys the table at `path` accepts, as its type's refusal of the probe names them;
/// `None` when the probe is not refused as an unknown field there (no such table).
fn accepted_keys(parse: &dyn Fn(&str) -> Result<(), String>, path: &[Step]) -> Option<Vec<String>> {
    let err = parse(&probe_document(path)).err()?;
    let marker = format!("unknown field `{PROBE}`");
    let at = err.find(&marker)?;
    let rest = &err[at + marker.len()..];
    let line = rest.lines().next().unwrap_or("");
    if line.contains("there are no fields") {
        return Some(Vec::new());
    }
    let expected = line.split_once("expected")?.1;
    // serde lists the fields as `a`, `a` or `b`, or one of `a`, `b`, ...: every other
    // piece between backticks is a key.
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

fn section_name(prefix: &str, path: &[Step]) -> String {
    let mut name = String::new();
    for (i, step) in path.iter().enumerate() {
        if i == 0 {
            name = if step.array {
                format!("[[{}]]", step.key)
            } else {
                format!("[{}]", step.key)
            };
        } else {
            name = format!("{name}.{}", step.key);
        }
    }
    if name.is_empty() {
        name = "(top level)".to_string();
    }
    format!("{prefix}{name}")
}

/// Every section of a file reachable from `path`, by name, with the keys it accepts.
fn code_sections(
    parse: &dyn Fn(&str) -> Result<(), String>,
    prefix: &str,
    path: &[Step],
    out: &mut BTreeMap<String, BTreeSet<String>>,
) {
    let Some(keys) = accepted_keys(parse, path) else {
        return;
    };
    out.insert(section_name(prefix, path), keys.iter().cloned().collect());
    for key in keys {
        for array in [false, true] {
            let mut child = path.to_vec();
            child.push(Step {
                key: key.clone(),
                array,
            });
            if accepted_keys(parse, &child).is_some() {
                code_sections(parse, prefix, &child, out);
                break;
            }
        }
    }
}

/// Every section the code accepts: the config file's, and the location graph file's
/// (named by `[geo] graph`) under "graph file ".
fn all_code_sections() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let config = |text: &str| {
        Config::parse(text)
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    };
    code_sections(&config, "", &[], &mut out);
    let graph = |text: &str| {
        director_plan::inputs::graph::parse(text, "graph.toml")
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    };
    code_sections(&graph, "graph file ", &[], &mut out);
    out
}

/// The page's sections and their rows: section → key → the line it is on (1-based).
/// A key given twice in one section is an error.
fn documented(text: &str) -> (BTreeMap<String, BTreeMap<String, usize>>, Vec<String>) {
    let mut sections: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut current: Option<String> = None;
    let mut in_code = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if line.starts_with('#') {
            let title = line.trim_start_matches('#').trim();
            current = title
                .strip_prefix('`')
                .and_then(|t| t.strip_suffix('`'))
                .filter(|t| !t.contains('`'))
                .map(str::to_string);
            if let Some(s) = &current {
                if sections.contains_key(s) {
                    errors.push(format!("docs/config.md:{n}: section `{s}` is given twice"));
                }
                sections.entry(s.clone()).or_default();
            }
            continue;
        }
        let (Some(section), Some(row)) = (&current, line.strip_prefix("| `")) else {
            continue;
        };
        let Some((key, _)) = row.split_once('`') else {
            continue;
        };
        let keys = sections.entry(section.clone()).or_default();
        if let Some(first) = keys.insert(key.to_string(), n) {
            errors.push(format!(
                "docs/config.md:{n}: `{section}` has a row for `{key}` twice (also line {first})"
            ));
        }
    }
    (sections, errors)
}

/// What differs between the code's sections and the page's, one line per key.
fn differences(
    code: &BTreeMap<String, BTreeSet<String>>,
    docs: &BTreeMap<String, BTreeMap<String, usize>>,
) -> Vec<String> {
    let mut out = Vec::new();
    let none = BTreeMap::new();
    for (section, keys) in code {
        let rows = docs.get(section);
        if rows.is_none() {
            out.push(format!(
                "docs/config.md has no section `{section}` (a heading \"## `{section}`\")"
            ));
        }
        let rows = rows.unwrap_or(&none);
        for key in keys {
            if !rows.contains_key(key) {
                out.push(format!(
                    "docs/config.md: `{section}` lacks a row for `{key}`, which the config accepts"
                ));
            }
        }
    }
    for (section, rows) in docs {
        let keys = code.get(section);
        if keys.is_none() {
            out.push(format!(
                "docs/config.md: section `{section}` is no section the config accepts"
            ));
        }
        for (key, line) in rows {
            if !keys.is_some_and(|k| k.contains(key)) {
                out.push(format!(
                    "docs/config.md:{line}: `{section}` documents `{key}`, which the config does \
                     not accept"
                ));
            }
        }
    }
    out
}

fn page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn the_config_page_documents_every_accepted_key_and_no_other() {
    let code = all_code_sections();
    let (docs, mut errors) = documented(&page());
    errors.extend(differences(&code, &docs));
    assert!(
        errors.is_empty(),
        "docs/config.md and the config types disagree:\n{}",
        errors.join("\n")
    );
}

/// The probe finds the sections it must, nested ones too, so the test above cannot pass
/// by finding nothing (a changed error message would otherwise hide every key).
#[test]
fn the_probe_reads_keys_from_the_code() {
    let code = all_code_sections();
    let has = |section: &str, key: &str| code.get(section).is_some_and(|k| k.contains(key));
    assert!(has("(top level)", "default_weights"), "{code:?}");
    assert!(has("[geo]", "database"), "{code:?}");
    assert!(has("[[site]]", "igp_cost"), "{code:?}");
    assert!(has("[[service]]", "vip"), "{code:?}");
    assert!(has("[[service]].health", "type"), "{code:?}");
    assert!(has("[[server]].load", "metric"), "{code:?}");
    assert!(has("[[zone]].records", "data"), "{code:?}");
    assert!(has("[metrics]", "listen"), "{code:?}");
    assert!(has("graph file [[edge]]", "both"), "{code:?}");
    // Tables of free keys (metric names, server names) are values, not sections.
    assert!(!code.contains_key("[[service]].priority"), "{code:?}");
    assert!(!code.contains_key("[[service]].portion"), "{code:?}");
}

/// The comparison names each missing and each extra key with its section.
#[test]
fn differences_name_the_key_and_the_section() {
    let code = BTreeMap::from([(
        "[geo]".to_string(),
        BTreeSet::from(["database".to_string(), "graph".to_string()]),
    )]);
    let (docs, errors) = documented(
        "## `[geo]`\n\n| key | type | default | meaning |\n|---|---|---|---|\n\
         | `database` | path | none | x |\n| `grahp` | path | none | x |\n\n## Other\n\n\
         | `graph` | path | none | not in a section |\n",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let d = differences(&code, &docs);
    assert_eq!(
        d,
        [
            "docs/config.md: `[geo]` lacks a row for `graph`, which the config accepts",
            "docs/config.md:6: `[geo]` documents `grahp`, which the config does not accept",
        ]
    );
}
