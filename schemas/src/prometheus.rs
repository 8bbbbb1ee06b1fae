//! Prometheus's text exposition, written one way by every `/metrics`: the
//! indexer's, the query service's, the memory's report as gauges, the LLM
//! simulator's. Here because this crate is the one all of them reach (the
//! analytics reach no other of ours).

use std::fmt::Write as _;

/// What a metric is to Prometheus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// The media type of the text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Metrics as Prometheus text: each metric's HELP and TYPE once, then its
/// samples.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// A metric and its samples: each a label set (`{a="b"}` as
    /// [`labels`] writes it, or empty) and a value; a sample without a value
    /// is left out.
    pub fn metric<V: std::fmt::Display>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        samples: impl IntoIterator<Item = (String, Option<V>)>,
    ) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.name());
        for (labels, value) in samples {
            if let Some(value) = value {
                let _ = writeln!(self.text, "{name}{labels} {value}");
            }
        }
        self
    }

    /// A metric of one sample without labels.
    pub fn one<V: std::fmt::Display>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        value: V,
    ) -> &mut Self {
        self.metric(name, kind, help, [(String::new(), Some(value))])
    }

    /// Text already in the format (another exposition's), appended.
    pub fn extend(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// A label set, `{name="value",…}`, its values escaped as the format asks;
/// empty for no labels.
pub fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let written: Vec<String> = pairs
        .iter()
        .map(|(name, value)| {
            let value = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{value}\"")
        })
        .collect();
    format!("{{{}}}", written.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_written_with_their_help_type_and_samples() {
        let mut metrics = Exposition::new();
        metrics
            .one("up", Kind::Gauge, "Whether it is up.", 1)
            .metric(
                "calls_total",
                Kind::Counter,
                "Calls by task.",
                [
                    (labels(&[("task", "gist \"page\"\n")]), Some(3.5)),
                    (labels(&[("task", "none")]), None),
                ],
            );
        assert_eq!(
            metrics.into_text(),
            "# HELP up Whether it is up.\n# TYPE up gauge\nup 1\n\
             # HELP calls_total Calls by task.\n# TYPE calls_total counter\n\
             calls_total{task=\"gist \\\"page\\\"\\n\"} 3.5\n"
        );
    }
}
