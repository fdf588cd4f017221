//! The operator's location graph: named places and the cost of going between them.
//!
//! TOML:
//! ```toml
//! [[node]]
//! name = "fra"
//! lat = 50.03   # lat/lon optional (both or neither)
//! lon = 8.57
//!
//! [[node]]
//! name = "ams"
//!
//! [[edge]]
//! from = "fra"
//! to = "ams"
//! cost = 7      # >= 0, finite; integers or floats
//! both = true   # optional: also ams -> fra with the same cost
//! ```
//! Refused, with the file, the line and the reason: TOML syntax errors, unknown keys, empty or
//! duplicate node names, edges naming unknown nodes, an edge from a node to itself, negative or
//! non-finite costs, the same directed edge twice (also through `both`), lat without lon and
//! coordinates out of range, and a file without nodes.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use anyhow::{bail, Result};
use serde::Deserialize;
use toml::Spanned;

use crate::model::GeoPoint;

/// A place of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub point: Option<GeoPoint>,
}

/// A weighted directed graph of places.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    index: HashMap<String, usize>,
    /// Outgoing edges per node: (target, cost).
    adj: Vec<Vec<(usize, f64)>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    node: Vec<Spanned<RawNode>>,
    #[serde(default)]
    edge: Vec<Spanned<RawEdge>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    lat: Option<f64>,
    lon: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEdge {
    from: String,
    to: String,
    cost: f64,
    #[serde(default)]
    both: bool,
}

/// Read a location graph from a TOML file.
pub fn load(path: &Path) -> Result<Graph> {
    let text = super::read_text(path, "location graph")?;
    parse(&text, &path.display().to_string())
}

/// Parse a location graph; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Graph> {
    let line = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let raw: File = match toml::from_str(text) {
        Ok(f) => f,
        Err(e) => {
            let at = e
                .span()
                .map(|s| format!(":{}", line(s.start)))
                .unwrap_or_default();
            bail!("{file}{at}: {}", e.message());
        }
    };
    let mut g = Graph::default();
    for n in &raw.node {
        let at = line(n.span().start);
        let RawNode { name, lat, lon } = n.get_ref();
        let name = name.trim();
        if name.is_empty() {
            bail!("{file}:{at}: node with an empty name");
        }
        let point = match (lat, lon) {
            (None, None) => None,
            (Some(lat), Some(lon)) => Some(
                super::csv::check_lat_lon(*lat, *lon)
                    .map_err(|e| anyhow::anyhow!("{file}:{at}: node {name:?}: {e}"))?,
            ),
            _ => bail!("{file}:{at}: node {name:?} has only one of lat and lon"),
        };
        if g.index.contains_key(name) {
            bail!("{file}:{at}: duplicate node {name:?}");
        }
        g.index.insert(name.to_string(), g.nodes.len());
        g.nodes.push(Node {
            name: name.to_string(),
            point,
        });
        g.adj.push(Vec::new());
    }
    if g.nodes.is_empty() {
        bail!("{file}: no [[node]] in the location graph");
    }
    for e in &raw.edge {
        let at = line(e.span().start);
        let RawEdge {
            from,
            to,
            cost,
            both,
        } = e.get_ref();
        let (from, to) = (from.trim(), to.trim());
        let node = |n: &str| match g.index.get(n) {
            Some(&i) => Ok(i),
            None => bail!("{file}:{at}: edge {from:?} -> {to:?} names an unknown node {n:?}"),
        };
        let (a, b) = (node(from)?, node(to)?);
        if !cost.is_finite() || *cost < 0.0 {
            bail!(
                "{file}:{at}: edge {from:?} -> {to:?} has cost {cost}: costs must be finite \
                 and >= 0"
            );
        }
        if a == b {
            bail!("{file}:{at}: edge from {from:?} to itself");
        }
        let dirs: &[(usize, usize)] = if *both { &[(a, b), (b, a)] } else { &[(a, b)] };
        for &(x, y) in dirs {
            if g.adj[x].iter().any(|&(t, _)| t == y) {
                bail!(
                    "{file}:{at}: duplicate edge {:?} -> {:?} (given before, directly or \
                     with both = true)",
                    g.nodes[x].name,
                    g.nodes[y].name
                );
            }
            g.adj[x].push((y, *cost));
        }
    }
    Ok(g)
}

#[derive(PartialEq)]
struct Item(f64, usize);
impl Eq for Item {}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1)) // min-heap on cost
    }
}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Graph {
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// Every directed edge: (from, to, cost).
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str, f64)> + '_ {
        self.adj.iter().enumerate().flat_map(move |(a, out)| {
            out.iter()
                .map(move |&(b, c)| (self.nodes[a].name.as_str(), self.nodes[b].name.as_str(), c))
        })
    }

    /// Least total cost from `node` to every node it reaches (itself at 0), by Dijkstra.
    /// Nodes it cannot reach are absent.
    pub fn shortest_from(&self, node: &str) -> Result<HashMap<String, f64>> {
        Ok(self.named(dijkstra(self.start(node)?, &self.adj)))
    }

    /// Least total cost to `node` from every node that reaches it (itself at 0): the
    /// `geo` metric of a site, measured as the DIY-CDN design does, from where the visitor
    /// is to where the resource is. On one-way or asymmetric edges this differs from
    /// [`Graph::shortest_from`]. Nodes with no way to `node` are absent (infinitely far).
    pub fn shortest_to(&self, node: &str) -> Result<HashMap<String, f64>> {
        let start = self.start(node)?;
        let mut reversed = vec![Vec::new(); self.adj.len()];
        for (from, out) in self.adj.iter().enumerate() {
            for &(to, cost) in out {
                reversed[to].push((from, cost));
            }
        }
        Ok(self.named(dijkstra(start, &reversed)))
    }

    fn start(&self, node: &str) -> Result<usize> {
        match self.index.get(node) {
            Some(&i) => Ok(i),
            None => bail!("unknown node {node:?} in the location graph"),
        }
    }

    /// Finite distances by node name.
    fn named(&self, dist: Vec<f64>) -> HashMap<String, f64> {
        dist.iter()
            .enumerate()
            .filter(|(_, d)| d.is_finite())
            .map(|(i, &d)| (self.nodes[i].name.clone(), d))
            .collect()
    }
}

/// Least total cost from `start` to every node over `adj` (outgoing edges per node);
/// infinity where there is no path.
fn dijkstra(start: usize, adj: &[Vec<(usize, f64)>]) -> Vec<f64> {
    let mut dist = vec![f64::INFINITY; adj.len()];
    dist[start] = 0.0;
    let mut heap = BinaryHeap::from([Item(0.0, start)]);
    while let Some(Item(d, u)) = heap.pop() {
        if d > dist[u] {
            continue;
        }
        for &(v, c) in &adj[u] {
            let nd = d + c;
            if nd < dist[v] {
                dist[v] = nd;
                heap.push(Item(nd, v));
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = r#"
[[node]]
name = "fra"
lat = 50.03
lon = 8.57

[[node]]
name = "ams"

[[node]]
name = "lon"

[[node]]
name = "nyc"

[[node]]
name = "island"

[[edge]]
from = "fra"
to = "ams"
cost = 7
both = true

[[edge]]
from = "ams"
to = "lon"
cost = 5.5

[[edge]]
from = "fra"
to = "lon"
cost = 20

[[edge]]
from = "lon"
to = "nyc"
cost = 70
"#;

    #[test]
    fn inputs_graph_dijkstra() {
        let g = parse(G, "g.toml").unwrap();
        assert_eq!(g.nodes().len(), 5);
        assert_eq!(
            g.node("fra").unwrap().point,
            Some(GeoPoint {
                lat: 50.03,
                lon: 8.57
            })
        );
        assert_eq!(g.node("ams").unwrap().point, None);
        assert_eq!(g.edges().count(), 5);
        let d = g.shortest_from("fra").unwrap();
        assert_eq!(d["fra"], 0.0);
        assert_eq!(d["ams"], 7.0);
        assert_eq!(d["lon"], 12.5); // via ams, not the direct 20
        assert_eq!(d["nyc"], 82.5);
        assert!(!d.contains_key("island"));
        let d = g.shortest_from("ams").unwrap();
        assert_eq!((d["fra"], d["lon"]), (7.0, 5.5));
        let d = g.shortest_from("nyc").unwrap(); // directed: nothing leaves nyc
        assert_eq!(d.len(), 1);
        let e = g.shortest_from("par").unwrap_err().to_string();
        assert!(e.contains("unknown node \"par\""), "{e}");
    }

    /// DIY-CDN: "the lengths of the shortest paths from all vertices of the graph (where
    /// visitors of our site can be located) to the locations of resources"; "if there is
    /// no way from the visitor to this place ... the distance will be equal to infinity".
    #[test]
    fn inputs_graph_distances_run_from_the_visitor_to_the_resource() {
        let g = parse(G, "g.toml").unwrap();
        // To nyc: everyone who reaches it, over one-way edges towards it.
        let d = g.shortest_to("nyc").unwrap();
        assert_eq!(
            (d["nyc"], d["lon"], d["ams"], d["fra"]),
            (0.0, 70.0, 75.5, 82.5)
        );
        assert!(!d.contains_key("island"));
        // To lon: ams -> lon is 5.5, fra -> lon 12.5 via ams; nyc has no way back.
        let d = g.shortest_to("lon").unwrap();
        assert_eq!((d["lon"], d["ams"], d["fra"]), (0.0, 5.5, 12.5));
        assert!(!d.contains_key("nyc"), "{d:?}");
        // One-way edges make the two directions differ: fra reaches lon, lon never fra.
        assert_eq!(g.shortest_from("fra").unwrap()["lon"], 12.5);
        assert!(!g.shortest_to("fra").unwrap().contains_key("lon"));
        // Asymmetric costs: the visitor at b pays b -> a, not a -> b.
        let two = "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n\
                   [[edge]]\nfrom = \"a\"\nto = \"b\"\ncost = 1\n\
                   [[edge]]\nfrom = \"b\"\nto = \"a\"\ncost = 9\n";
        let g = parse(two, "two.toml").unwrap();
        assert_eq!(g.shortest_to("a").unwrap()["b"], 9.0);
        assert_eq!(g.shortest_from("a").unwrap()["b"], 1.0);
    }

    #[test]
    fn inputs_graph_errors() {
        let n = "[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n";
        let cases = [
            (
                format!("{n}[[edge]]\nfrom = \"a\"\nto = \"c\"\ncost = 1\n"),
                "g.toml:5: edge \"a\" -> \"c\" names an unknown node \"c\"",
            ),
            (
                format!("{n}[[edge]]\nfrom = \"a\"\nto = \"b\"\ncost = -1\n"),
                "g.toml:5: edge \"a\" -> \"b\" has cost -1",
            ),
            (
                format!("{n}[[edge]]\nfrom = \"a\"\nto = \"b\"\ncost = nan\n"),
                "has cost NaN",
            ),
            (
                format!("{n}[[node]]\nname = \"a\"\n"),
                "g.toml:5: duplicate node \"a\"",
            ),
            (
                format!(
                    "{n}[[edge]]\nfrom = \"b\"\nto = \"a\"\ncost = 1\n\
                     [[edge]]\nfrom = \"a\"\nto = \"b\"\ncost = 2\nboth = true\n"
                ),
                "g.toml:9: duplicate edge \"b\" -> \"a\"",
            ),
            (
                format!("{n}[[edge]]\nfrom = \"a\"\nto = \"a\"\ncost = 1\n"),
                "edge from \"a\" to itself",
            ),
            (
                "[[node]]\nname = \"a\"\nlat = 1\n".to_string(),
                "g.toml:1: node \"a\" has only one of lat and lon",
            ),
            (
                "[[node]]\nname = \"a\"\nlat = 100\nlon = 1\n".to_string(),
                "latitude 100 is out of range",
            ),
            (
                "[[node]]\nname = \"a\"\ncolour = \"red\"\n".to_string(),
                "unknown field `colour`",
            ),
            (
                "[[node]]\nname = \"a\"\n[[edge]]\nfrom = \"a\"\nto =\n".to_string(),
                "g.toml:5",
            ),
            (
                "[[edge]]\nfrom = \"a\"\nto = \"b\"\ncost = 1\n".to_string(),
                "no [[node]]",
            ),
            (
                format!("{n}[[edge]]\nfrom = \"a\"\nto = \"b\"\n"),
                "missing field `cost`",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let e = parse(text, "g.toml").unwrap_err().to_string();
            assert!(e.starts_with("g.toml"), "{e}");
            assert!(e.contains(want), "case {i}: {e:?} lacks {want:?}");
        }
        let e = load(Path::new("/nonexistent/graph.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/graph.toml") && e.contains("No such file"),
            "{e}"
        );
    }
}
