//! A plain-text table: a title, column headings, rows of cells and notes under it.
//! Text columns are left-aligned, numeric ones right-aligned, so figures line up.

pub struct Table {
    title: String,
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(ToString::to_string).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.headers.len(),
            "a row of {:?} has the wrong number of cells",
            self.title
        );
        self.rows.push(cells);
    }

    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    pub fn print(&self) {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let numeric: Vec<bool> = (0..self.headers.len())
            .map(|c| !self.rows.is_empty() && self.rows.iter().all(|r| looks_numeric(&r[c])))
            .collect();
        let line = |cells: &[String]| -> String {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(c, s)| {
                    if numeric[c] {
                        format!("{s:>w$}", w = widths[c])
                    } else {
                        format!("{s:<w$}", w = widths[c])
                    }
                })
                .collect();
            format!("  {}", parts.join("  ")).trim_end().to_string()
        };
        println!("\n{}", self.title);
        println!("{}", line(&self.headers));
        println!(
            "  {}",
            widths
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .join("  ")
        );
        for r in &self.rows {
            println!("{}", line(r));
        }
        for n in &self.notes {
            println!("  {n}");
        }
    }
}

/// Figures such as `1,234`, `12.5`, `97%`, `-` (no value) are right-aligned.
fn looks_numeric(s: &str) -> bool {
    s == "-" || (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || ",.%-x".contains(c)))
}

/// 1234567 -> "1,234,567".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Median, min and max of a non-empty sample.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        assert!(!values.is_empty(), "a spread of no values");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if !n.is_multiple_of(2) {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// The three figures formatted with `f`, for three table cells.
    pub fn cells(&self, f: impl Fn(f64) -> String) -> [String; 3] {
        [f(self.median), f(self.min), f(self.max)]
    }
}

/// A label and its figures, written as a sentence: for results too irregular for columns.
pub struct Pair(pub &'static str, pub String);

/// A title and one `label  figures` line per pair, the labels padded to one width.
pub fn print_pairs(title: &str, rows: &[Pair]) {
    println!("\n{title}");
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    for r in rows {
        println!("  {:<w$}  {}", r.0, r.1);
    }
}
