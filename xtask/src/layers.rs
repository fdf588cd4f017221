//! `cargo xtask lint`'s layer check. The rules are written once, in ARCHITECTURE.md's
//! ```` ```layers ```` block: which workspace crates a crate may depend on, which crates
//! must stay pure (no aya, no build script), and for the crates with layers, which of its
//! top-level modules each module may use. The check reads every crate's sources with
//! `syn` (use trees, paths in code, and paths inside macros), resolves each `crate::`,
//! `super::`, `self::` and child-module path to the file that defines it, and fails on a
//! module using one its rule does not list, and on any import cycle between files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::setup::root;

/// The crates whose sources are checked (director-ebpf too: it is a workspace of its own).
const CRATES: &[&str] = &[
    "director-common",
    "director-plan",
    "director-ctl",
    "director-ebpf",
    "ebpf-build",
    "xtask",
    "tests",
];

/// The rules of ARCHITECTURE.md.
#[derive(Debug, Default)]
struct Rules {
    /// Crate → the workspace crates it may depend on.
    crates: BTreeMap<String, BTreeSet<String>>,
    /// Crates that must not pull in aya or have a build script.
    pure: BTreeSet<String>,
    /// (crate, module) → the modules of the same crate it may use.
    modules: BTreeMap<(String, String), BTreeSet<String>>,
}

fn parse_rules(text: &str) -> Result<Rules> {
    let block = text
        .split("```layers\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .context("ARCHITECTURE.md has no ```layers block")?;
    let mut r = Rules::default();
    for (n, line) in block.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (lhs, rhs) = line
            .split_once(':')
            .with_context(|| format!("ARCHITECTURE.md layers line {}: no ':'", n + 1))?;
        let names: BTreeSet<String> = rhs
            .split_whitespace()
            .filter(|w| *w != "-")
            .map(str::to_string)
            .collect();
        match lhs.trim().split_once('/') {
            _ if lhs.trim() == "pure" => r.pure.extend(names),
            Some((krate, module)) => {
                r.modules
                    .insert((krate.to_string(), module.to_string()), names);
            }
            None => {
                r.crates.insert(lhs.trim().to_string(), names);
            }
        }
    }
    Ok(r)
}

/// One reference from a file to a module path, where it was written.
#[derive(Debug, Clone)]
struct Reference {
    line: usize,
    /// The module path it names, from the crate root (`["kernel", "maps"]`).
    path: Vec<String>,
}

/// One source file of a crate root.
#[derive(Debug)]
struct File {
    path: PathBuf,
    /// Its module path from the root (empty for the root file).
    module: Vec<String>,
    refs: Vec<Reference>,
}

/// The visitor that collects a file's module references.
struct Collector<'a> {
    /// The file's module path.
    file_module: Vec<String>,
    /// Inline modules (`mod tests { .. }`) the visitor is inside.
    inline: Vec<String>,
    /// Children declared with `mod x;` in this file (at its top level).
    children: &'a BTreeSet<String>,
    refs: Vec<Reference>,
}

impl Collector<'_> {
    fn here(&self) -> Vec<String> {
        let mut m = self.file_module.clone();
        m.extend(self.inline.iter().cloned());
        m
    }

    /// The absolute module path of `segments` (a path as written), if it starts at a
    /// module of this crate.
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut at = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.here(),
            "super" => {
                let mut m = self.here();
                m.pop()?;
                m
            }
            name if self.inline.is_empty() && self.children.contains(name) => {
                let mut m = self.here();
                m.push(name.to_string());
                return Some(m.into_iter().chain(segments[1..].iter().cloned()).collect());
            }
            _ => return None,
        };
        let mut rest = segments[1..].iter().peekable();
        while rest.peek().is_some_and(|s| *s == "super") {
            at.pop()?;
            rest.next();
        }
        at.extend(rest.filter(|s| *s != "self").cloned());
        Some(at)
    }

    fn note(&mut self, line: usize, segments: Vec<String>) {
        if let Some(path) = self.absolute(&segments) {
            self.refs.push(Reference { line, path });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut p = prefix.clone();
                p.push(n.ident.to_string());
                self.note(n.ident.span().start().line, p);
            }
            syn::UseTree::Rename(n) => {
                let mut p = prefix.clone();
                p.push(n.ident.to_string());
                self.note(n.ident.span().start().line, p);
            }
            syn::UseTree::Glob(g) => {
                self.note(g.star_token.spans[0].start().line, prefix.clone());
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// Paths inside macro calls (`assert!(crate::x::y(..))`, `proptest! { .. }`), which
    /// syn leaves as tokens: every `crate`/`super`/`self` followed by `::` and names.
    fn tokens(&mut self, ts: TokenStream) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if matches!(id.to_string().as_str(), "crate" | "super") => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    loop {
                        let colons = matches!((tokens.get(j), tokens.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                                if a.as_char() == ':' && b.as_char() == ':');
                        match (colons, tokens.get(j + 2)) {
                            (true, Some(TokenTree::Ident(n))) => {
                                segs.push(n.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.note(line, segs);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.inline.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.inline.pop();
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        // A one-word path is a local name (a variable may share a module's name); a
        // module is only reached through `a::b`.
        if let (Some(first), true) = (p.segments.first(), segs.len() > 1) {
            self.note(first.ident.span().start().line, segs);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// The file declaring module `module` under `dir` (the root's directory), if any.
fn module_file(dir: &Path, module: &[String]) -> Option<PathBuf> {
    if module.is_empty() {
        return None;
    }
    let rel: PathBuf = module.iter().collect();
    let flat = dir.join(&rel).with_extension("rs");
    if flat.is_file() {
        return Some(flat);
    }
    let nested = dir.join(&rel).join("mod.rs");
    nested.is_file().then_some(nested)
}

/// `mod x;` declarations of a parsed file (not inline ones), with any `#[path]`.
fn declared(ast: &syn::File) -> Vec<(String, Option<String>)> {
    ast.items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(m) if m.content.is_none() => {
                let path = m.attrs.iter().find_map(|a| {
                    let syn::Meta::NameValue(nv) = &a.meta else {
                        return None;
                    };
                    if !nv.path.is_ident("path") {
                        return None;
                    }
                    match &nv.value {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => Some(s.value()),
                        _ => None,
                    }
                });
                Some((m.ident.to_string(), path))
            }
            _ => None,
        })
        .collect()
}

/// Every file of the crate root `root_file`, following its `mod` declarations.
fn files_of(root_file: &Path) -> Result<Vec<File>> {
    let dir = root_file
        .parent()
        .context("a root file has a folder")?
        .to_path_buf();
    let mut out = Vec::new();
    let mut todo = vec![(root_file.to_path_buf(), Vec::<String>::new())];
    while let Some((path, module)) = todo.pop() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", path.display()))?;
        let decl = declared(&ast);
        let children: BTreeSet<String> = decl.iter().map(|(n, _)| n.clone()).collect();
        for (name, explicit) in decl {
            let mut m = module.clone();
            m.push(name);
            let file = match explicit {
                Some(p) => Some(path.parent().unwrap_or(&dir).join(p)),
                None => module_file(&dir, &m),
            };
            if let Some(f) = file {
                todo.push((f, m));
            }
        }
        let mut c = Collector {
            file_module: module.clone(),
            inline: Vec::new(),
            children: &children,
            refs: Vec::new(),
        };
        c.visit_file(&ast);
        out.push(File {
            path,
            module,
            refs: c.refs,
        });
    }
    Ok(out)
}

/// The crate roots of a package: its lib and main, binaries, and integration tests.
fn roots(pkg: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for f in ["src/lib.rs", "src/main.rs"] {
        if pkg.join(f).is_file() {
            out.push(pkg.join(f));
        }
    }
    for dir in ["src/bin", "tests"] {
        let Ok(rd) = std::fs::read_dir(pkg.join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                if p.extension().is_some_and(|e| e == "rs") {
                    Some(p)
                } else {
                    Some(p.join("main.rs")).filter(|m| m.is_file())
                }
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Cycles among `files` (by the references between them): each strongly connected set of
/// two or more files, with one reference per edge inside it.
fn cycles(files: &[File], edges: &BTreeMap<(usize, usize), usize>) -> Vec<String> {
    // Tarjan's algorithm, iteratively small enough for a crate's files to recurse.
    struct Tarjan<'a> {
        adj: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
        _f: &'a [File],
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on[v] = true;
            for w in self.adj[v].clone() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.out.push(scc);
                }
            }
        }
    }
    let mut adj = vec![Vec::new(); files.len()];
    for &(a, b) in edges.keys() {
        adj[a].push(b);
    }
    let n = files.len();
    let mut t = Tarjan {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
        _f: files,
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
        .into_iter()
        .map(|scc| {
            let set: BTreeSet<usize> = scc.iter().copied().collect();
            let mut lines: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                .map(|(&(a, b), line)| {
                    format!(
                        "  {}:{line} uses {}",
                        rel(&files[a].path),
                        rel(&files[b].path)
                    )
                })
                .collect();
            lines.sort();
            format!(
                "import cycle between {} files:\n{}",
                set.len(),
                lines.join("\n")
            )
        })
        .collect()
}

/// Checks one crate root: its files' cycles, and its modules against `allowed` (the
/// module rules of its crate, when it has any).
fn check_root(
    krate: &str,
    root_file: &Path,
    allowed: Option<&BTreeMap<String, BTreeSet<String>>>,
    problems: &mut Vec<String>,
) -> Result<()> {
    let files = files_of(root_file)?;
    let dir = root_file.parent().context("a root file has a folder")?;
    let index: BTreeMap<PathBuf, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.clone(), i))
        .collect();
    let mut edges: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        for r in &f.refs {
            // The longest prefix of the path that is a file of this root.
            let target = (1..=r.path.len())
                .rev()
                .find_map(|k| module_file(dir, &r.path[..k]))
                .and_then(|p| index.get(&p).copied());
            if let Some(t) = target.filter(|&t| t != i) {
                edges.entry((i, t)).or_insert(r.line);
            }
            let (Some(rules), Some(from), Some(to)) = (allowed, f.module.first(), r.path.first())
            else {
                continue;
            };
            if from == to || module_file(dir, &r.path[..1]).is_none() {
                continue;
            }
            match rules.get(from) {
                Some(may) if may.contains(to) => {}
                Some(may) => problems.push(format!(
                    "{}:{}: {krate}'s {from} uses {to}; ARCHITECTURE.md lets it use only: {}",
                    rel(&f.path),
                    r.line,
                    if may.is_empty() {
                        "nothing else of the crate".to_string()
                    } else {
                        may.iter().cloned().collect::<Vec<_>>().join(", ")
                    }
                )),
                None => problems.push(format!(
                    "{}: {krate}'s module {from} has no rule in ARCHITECTURE.md's layers",
                    rel(&f.path)
                )),
            }
        }
    }
    problems.extend(cycles(&files, &edges));
    Ok(())
}

/// The workspace crates `pkg`'s manifest depends on (any kind of dependency).
fn workspace_deps(pkg: &Path) -> Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(pkg.join("Cargo.toml"))?;
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t.ends_with("dependencies]");
            continue;
        }
        if in_deps && t.contains("path = \"../") {
            if let Some((name, _)) = t.split_once('=') {
                out.insert(name.trim().to_string());
            }
        }
    }
    Ok(out)
}

/// A module-rule graph must itself be one-way: a cycle in it would allow one in the code.
fn rules_one_way(krate: &str, rules: &BTreeMap<String, BTreeSet<String>>) -> Result<()> {
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut left: BTreeSet<&str> = rules.keys().map(String::as_str).collect();
    while !left.is_empty() {
        let ready: Vec<&str> = left
            .iter()
            .copied()
            .filter(|m| {
                rules[*m]
                    .iter()
                    .all(|d| done.contains(d.as_str()) || !rules.contains_key(d))
            })
            .collect();
        if ready.is_empty() {
            bail!(
                "ARCHITECTURE.md's layers for {krate} have a cycle among: {}",
                left.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        for m in ready {
            left.remove(m);
            done.insert(m);
        }
    }
    for (m, may) in rules {
        if let Some(unknown) = may.iter().find(|d| !rules.contains_key(*d)) {
            bail!("ARCHITECTURE.md's layers: {krate}/{m} names {unknown}, which has no rule");
        }
    }
    Ok(())
}

pub fn check() -> Result<()> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md"))
        .context("reading ARCHITECTURE.md")?;
    let rules = parse_rules(&text)?;
    let mut problems = Vec::new();
    for krate in CRATES {
        let pkg = root().join(krate);
        // Crate arrows.
        let may = rules
            .crates
            .get(*krate)
            .with_context(|| format!("ARCHITECTURE.md's layers have no line for {krate}"))?;
        for dep in workspace_deps(&pkg)? {
            if !may.contains(&dep) {
                problems.push(format!(
                    "{krate}/Cargo.toml depends on {dep}; ARCHITECTURE.md does not let it"
                ));
            }
        }
        if rules.pure.contains(*krate) {
            if pkg.join("build.rs").exists() {
                problems.push(format!("{krate} must be pure but has a build script"));
            }
            let tree = Command::new("cargo")
                .current_dir(root())
                .args([
                    "tree",
                    "-p",
                    krate,
                    "-e",
                    "normal,build",
                    "--prefix",
                    "none",
                ])
                .args(["-f", "{p}"])
                .output()
                .context("running cargo tree")?;
            if !tree.status.success() {
                bail!(
                    "cargo tree -p {krate}: {}",
                    String::from_utf8_lossy(&tree.stderr)
                );
            }
            if let Some(aya) = String::from_utf8_lossy(&tree.stdout)
                .lines()
                .find(|l| l.starts_with("aya"))
            {
                problems.push(format!("{krate} must be pure but depends on {aya}"));
            }
        }
        // Module arrows and file cycles, root by root.
        let modules: BTreeMap<String, BTreeSet<String>> = rules
            .modules
            .iter()
            .filter(|((k, _), _)| k == krate)
            .map(|((_, m), may)| (m.clone(), may.clone()))
            .collect();
        if !modules.is_empty() {
            rules_one_way(krate, &modules)?;
        }
        for r in roots(&pkg) {
            // Module rules are for the library (and the binary of the same name).
            let lib = r.ends_with("src/lib.rs") || r.ends_with("src/main.rs");
            let allowed = (lib && !modules.is_empty()).then_some(&modules);
            check_root(krate, &r, allowed, &mut problems)?;
        }
    }
    if !problems.is_empty() {
        bail!(
            "the layer check found {} problem(s):\n{}",
            problems.len(),
            problems.join("\n")
        );
    }
    println!("xtask: layers and import cycles: clean");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_read_from_the_block() {
        let r = parse_rules(
            "text\n```layers\n# comment\na: b c\npure: a\na/x: y   # why\na/y: -\n```\nmore",
        )
        .unwrap();
        assert_eq!(r.crates["a"], ["b", "c"].map(String::from).into());
        assert!(r.pure.contains("a"));
        assert_eq!(
            r.modules[&("a".into(), "x".into())],
            ["y".to_string()].into()
        );
        assert!(r.modules[&("a".into(), "y".into())].is_empty());
    }

    #[test]
    fn a_rule_cycle_is_refused() {
        let rules: BTreeMap<String, BTreeSet<String>> = [
            ("a".to_string(), ["b".to_string()].into()),
            ("b".to_string(), ["a".to_string()].into()),
        ]
        .into();
        assert!(rules_one_way("k", &rules).is_err());
    }

    #[test]
    fn paths_resolve_from_where_they_are_written() {
        let children: BTreeSet<String> = ["probe".to_string()].into();
        let c = Collector {
            file_module: vec!["health".into()],
            inline: Vec::new(),
            children: &children,
            refs: Vec::new(),
        };
        let s = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            c.absolute(&s(&["super", "kernel", "Maps"])),
            Some(s(&["kernel", "Maps"]))
        );
        assert_eq!(c.absolute(&s(&["crate", "api"])), Some(s(&["api"])));
        assert_eq!(
            c.absolute(&s(&["probe", "Probe"])),
            Some(s(&["health", "probe", "Probe"]))
        );
        assert_eq!(c.absolute(&s(&["std", "fmt"])), None);
        let t = Collector {
            inline: vec!["tests".into()],
            ..c
        };
        assert_eq!(
            t.absolute(&s(&["super", "Plan"])),
            Some(s(&["health", "Plan"]))
        );
    }
}
