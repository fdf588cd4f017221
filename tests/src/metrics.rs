//! Reading `director-ctl run`'s metrics endpoint back, with a real Prometheus text parser.

use std::process::Command;

/// One sample: metric name, labels sorted by name, value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// GET /metrics at `listen` from inside the network namespace `ns` (curl), parsed.
pub fn scrape(ns: &str, listen: &str) -> Result<Vec<Sample>, String> {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args(["curl", "-sS", "--max-time", "5"])
        .arg(format!("http://{listen}/metrics"))
        .output()
        .map_err(|e| format!("running curl: {e}"))?;
    if !out.status.success() {
        return Err(format!("curl: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8(out.stdout).map_err(|e| e.to_string())?;
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines)
        .map_err(|e| format!("not Prometheus text ({e}):\n{text}"))?;
    scrape
        .samples
        .into_iter()
        .map(|s| {
            let v = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                other => return Err(format!("{}: unexpected {other:?}", s.metric)),
            };
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.sort();
            Ok((s.metric, labels, v))
        })
        .collect()
}

/// The value of `metric` with exactly `labels`, if scraped.
pub fn value(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    want.sort();
    samples
        .iter()
        .find(|(m, l, _)| m == metric && *l == want)
        .map(|s| s.2)
}
