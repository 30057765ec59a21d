//! The architecture, checked against the code: the driver's modules import
//! only the layers below them (the order `lib.rs`'s diagram declares), and
//! `docs/UNSAFE.md`'s inventory of `unsafe` matches the sources.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments and without its unit-test
/// module (tests may reach across layers).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The layers `driver/src/lib.rs` declares, top first: the first word of
/// each line of its `text` diagram that names a module.
fn declared_layers() -> Vec<String> {
    let lib = std::fs::read_to_string(root().join("driver/src/lib.rs")).expect("lib.rs");
    let mut in_diagram = false;
    let mut layers = Vec::new();
    for l in lib.lines() {
        let Some(doc) = l.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.strip_prefix(' ').unwrap_or(doc);
        if doc.starts_with("```text") {
            in_diagram = true;
            continue;
        }
        if in_diagram && doc.starts_with("```") {
            break;
        }
        if in_diagram && !doc.starts_with(' ') && !doc.is_empty() {
            let name = doc.split_whitespace().next().expect("a word");
            layers.push(name.to_string());
        }
    }
    layers
}

#[test]
fn every_driver_module_imports_only_the_layers_below_it() {
    let layers = declared_layers();
    assert!(layers.len() >= 8, "the diagram in lib.rs lists {layers:?}");
    let src = root().join("driver/src");
    // Every module the crate root declares is in the diagram.
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    for l in lib.lines() {
        let l = l
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        if let Some(m) = l.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
            assert!(
                layers.iter().any(|x| x == m),
                "module {m} is not in lib.rs's diagram {layers:?}"
            );
        }
    }
    let mut wrong = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let mut files = Vec::new();
        let dir = src.join(layer);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let file = src.join(format!("{layer}.rs"));
        if file.is_file() {
            files.push(file);
        }
        assert!(!files.is_empty(), "layer {layer} has no sources");
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let c = code(&f);
            for (at, _) in c.match_indices("crate::") {
                let rest = &c[at + "crate::".len()..];
                let word: String = rest
                    .chars()
                    .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                    .collect();
                let below = layers[i + 1..].contains(&word);
                if word != *layer && !below {
                    wrong.push(format!(
                        "{}: crate::{word}",
                        f.strip_prefix(&src).unwrap_or(&f).display()
                    ));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports that do not point down the layers {layers:?} (a name re-exported at the crate root counts as pointing up):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_unsafe_inventory_matches_the_code() {
    let doc = std::fs::read_to_string(root().join("docs/UNSAFE.md")).expect("docs/UNSAFE.md");
    let mut listed = BTreeMap::new();
    for l in doc.lines() {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        if cells.len() >= 4 && cells[1].starts_with('`') {
            let file = cells[1].trim_matches('`').to_string();
            let n: usize = cells[2].parse().unwrap_or_else(|_| panic!("count in {l}"));
            assert!(!cells[3].is_empty(), "{file}: say what it views");
            listed.insert(file, n);
        }
    }
    let mut found = BTreeMap::new();
    for krate in ["core/src", "fabric/src", "driver/src", "gpu/src"] {
        let mut files = Vec::new();
        rust_files(&root().join(krate), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).expect("source");
            let n: usize = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| {
                    l.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .filter(|w| *w == "unsafe")
                        .count()
                })
                .sum();
            if n > 0 {
                let rel = f
                    .strip_prefix(root())
                    .unwrap_or(&f)
                    .to_string_lossy()
                    .replace("/../", "/");
                found.insert(rel.trim_start_matches("./").to_string(), n);
            }
        }
    }
    assert_eq!(
        listed, found,
        "docs/UNSAFE.md (left) against the code (right)"
    );
}

/// The `TANDEM_*` names in `text`.
fn tandem_vars(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("TANDEM_") {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if name.len() > "TANDEM_".len() && !name.ends_with('_') {
            out.insert(name);
        }
    }
    out
}

/// README's "Configuration" section, up to the next section.
fn readme_configuration() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let start = readme
        .find("### Configuration")
        .expect("a Configuration section");
    let end = start + readme[start..].find("\n## ").expect("a section after it");
    readme[start..end].to_string()
}

/// README's configuration tables list every `TANDEM_*` variable that the
/// library and the tools read, and nothing they do not.
#[test]
fn readme_lists_every_environment_variable() {
    let rows: String = readme_configuration()
        .lines()
        .filter(|l| l.starts_with("| `TANDEM_"))
        .map(|l| l.split('|').nth(1).unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let documented = tandem_vars(&rows);
    let mut read = std::collections::BTreeSet::new();
    for dir in ["driver/src", "fabric/src", "benches/src", "verify/src"] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name == "tests.rs" || name.ends_with("_tests.rs") || name == "sim.rs" {
                continue;
            }
            // String literals only: a variable read, set or passed on.
            let c = code(&f);
            // The name that starts the literal (not the first name of the
            // text after it in sorted order: that may be a later name cut
            // short at the window's end).
            for (at, _) in c.match_indices("\"TANDEM_") {
                let name: String = c[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                read.extend(tandem_vars(&name));
            }
        }
    }
    let missing: Vec<_> = read.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "read but not in README's tables: {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&read).collect();
    assert!(
        stale.is_empty(),
        "in README's tables but read nowhere: {stale:?}"
    );
}

/// Settings in one place: every variable of README's `Config` and
/// `Layout` tables is looked up in the driver only in `config.rs`,
/// which `Config::from_env` and `Layout::from_env` read them from (the
/// launcher passes the layout's on to ranks it starts elsewhere through
/// `Layout::vars`, also there); the bootstrap, the transports and the
/// collectives take their settings from the `Config` they are given.
#[test]
fn tuning_variables_are_read_only_by_config() {
    let mut tuning = std::collections::BTreeSet::new();
    let mut in_settings = false;
    for l in readme_configuration().lines() {
        if l.starts_with("| variable |") {
            in_settings = l.contains("`Config` field") || l.contains("`Layout` field");
        } else if in_settings && l.starts_with("| `TANDEM_") {
            tuning.extend(tandem_vars(l.split('|').nth(1).unwrap_or("")));
        }
    }
    assert!(
        tuning.len() >= 25 && tuning.contains("TANDEM_RNR_RETRY"),
        "the settings tables list {tuning:?}"
    );
    let mut files = Vec::new();
    rust_files(&root().join("driver/src"), &mut files);
    let mut strays = Vec::new();
    for f in files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "config.rs" || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let c = code(&f);
        for (at, _) in c.match_indices("\"TANDEM_") {
            // A read: the literal is the argument of an environment lookup
            // (messages may name a variable).
            let before = &c[at.saturating_sub(12)..at];
            if !["var(", "var_os(", "env_num(", "env_secs(", "num("]
                .iter()
                .any(|r| before.ends_with(r))
            {
                continue;
            }
            for v in tandem_vars(&c[at + 1..at + 60.min(c.len() - at)])
                .into_iter()
                .take(1)
            {
                if tuning.contains(&v) {
                    strays.push(format!("{}: {v}", f.display()));
                }
            }
        }
    }
    assert!(
        strays.is_empty(),
        "tuning variables read outside config.rs: {strays:?}"
    );
}
