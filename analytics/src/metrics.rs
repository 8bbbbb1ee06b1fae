//! The report's numbers as Prometheus gauges (`memweave_memory_*`), for the
//! query service's and the indexer's `/metrics`.

use std::fmt::Write as _;

use serde_json::Value;

/// Prometheus text for a report (as [`crate::report::report`] makes it).
pub fn prometheus(report: &Value) -> String {
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, samples: Vec<(String, &Value)>| {
        let _ = writeln!(text, "# HELP memweave_memory_{name} {help}");
        let _ = writeln!(text, "# TYPE memweave_memory_{name} gauge");
        for (labels, value) in samples {
            if let Some(value) = value.as_f64() {
                let _ = writeln!(text, "memweave_memory_{name}{labels} {value}");
            }
        }
    };
    gauge(
        "epoch",
        "Checkpoint the numbers describe.",
        one(&report["epoch"]),
    );
    gauge(
        "documents",
        "Documents in the tables.",
        one(&report["overview"]["documents"]),
    );
    gauge(
        "tokens",
        "Tokens of the documents.",
        one(&report["overview"]["tokens"]),
    );
    gauge(
        "entities_per_1k_tokens",
        "Graph entities per 1,000 tokens.",
        one(&report["density"]["entities_per_1k_tokens"]),
    );
    gauge(
        "relations_per_1k_tokens",
        "Graph relations per 1,000 tokens.",
        one(&report["density"]["relations_per_1k_tokens"]),
    );
    gauge(
        "gist_compression_rate",
        "ReadAgent's compression rate of the gists, percent.",
        one(&report["gists"]["compression_rate"]),
    );
    gauge(
        "model_tokens_per_corpus_token",
        "Model tokens (in and out) of every call made, per token of the documents.",
        one(&report["cost"]["tokens_per_corpus_token"]),
    );
    gauge(
        "rows",
        "Rows per table.",
        labelled(report, "rows", &["table"], "rows"),
    );
    for (by, section, label) in [
        ("task", "calls_by_task", "task"),
        ("memory", "calls_by_memory", "memory"),
    ] {
        gauge(
            &format!("{by}_calls"),
            &format!("Model calls paid for, per {by}."),
            labelled(report, section, &[label], "calls"),
        );
        gauge(
            &format!("{by}_cache_hits"),
            &format!("Model calls answered from the cache, per {by}."),
            labelled(report, section, &[label], "cache_hits"),
        );
        gauge(
            &format!("{by}_tokens_per_corpus_token"),
            &format!("Model tokens (in and out) paid for per token of the documents, per {by}."),
            labelled(report, section, &[label], "tokens_per_corpus_token"),
        );
        gauge(
            &format!("{by}_tokens"),
            &format!("Model tokens paid for, per {by} and direction."),
            by_direction(
                labelled(report, section, &[label], "tokens_in"),
                labelled(report, section, &[label], "tokens_out"),
            ),
        );
    }
    gauge(
        "errors",
        "Error rows per stage and kind.",
        labelled(report, "errors", &["stage", "kind"], "errors"),
    );
    gauge(
        "tree_nodes",
        "Tree nodes per tree.",
        labelled(report, "trees", &["tree"], "nodes"),
    );
    gauge(
        "tree_max_depth",
        "Deepest tree per kind of tree.",
        labelled(report, "trees", &["tree"], "max_depth"),
    );
    gauge(
        "tree_mean_fanout",
        "Mean children of a parent node, per tree.",
        labelled(report, "trees", &["tree"], "mean_fanout"),
    );
    text
}

/// One sample per row of `section`: labels from `labels`' columns, the value
/// from `value`'s.
/// Token samples of both directions, each labelled `direction="in"` or
/// `"out"` after its other labels (`{…}`, never empty).
pub fn by_direction<V>(
    tokens_in: Vec<(String, V)>,
    tokens_out: Vec<(String, V)>,
) -> Vec<(String, V)> {
    let label = |direction: &'static str| {
        move |(labels, value): (String, V)| {
            let inner = labels.trim_end_matches('}');
            (format!("{inner},direction=\"{direction}\"}}"), value)
        }
    };
    tokens_in
        .into_iter()
        .map(label("in"))
        .chain(tokens_out.into_iter().map(label("out")))
        .collect()
}

fn one(value: &Value) -> Vec<(String, &Value)> {
    vec![(String::new(), value)]
}

fn labelled<'a>(
    report: &'a Value,
    section: &str,
    labels: &[&str],
    value: &str,
) -> Vec<(String, &'a Value)> {
    report[section]
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| {
            let pairs: Vec<String> = labels
                .iter()
                .map(|l| format!("{l}=\"{}\"", escape(row[*l].as_str().unwrap_or_default())))
                .collect();
            (format!("{{{}}}", pairs.join(",")), &row[value])
        })
        .collect()
}

/// A label value as the exposition format quotes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_samples_carry_their_direction_after_their_labels() {
        let samples = by_direction(
            vec![("{task=\"gist_page\"}".to_string(), 5)],
            vec![("{task=\"gist_page\"}".to_string(), 2)],
        );
        assert_eq!(
            samples,
            [
                ("{task=\"gist_page\",direction=\"in\"}".to_string(), 5),
                ("{task=\"gist_page\",direction=\"out\"}".to_string(), 2),
            ]
        );
    }
}
