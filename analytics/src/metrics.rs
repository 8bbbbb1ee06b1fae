//! The report's numbers as Prometheus gauges (`memweave_memory_*`), for the
//! query service's and the indexer's `/metrics`.

use memweave_schemas::TableStore;
use memweave_schemas::prometheus::{Exposition, Kind, labels as label_set};

use crate::catalog::{Catalog, CatalogError};
use crate::report::{Calls, Report, ReportError, report};

/// Why the memory's gauges could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GaugeError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// The gauges of the memory at checkpoint `epoch` (what `/metrics` shows of
/// the tables, for the indexer and the query service alike).
pub async fn memory_gauges(store: &TableStore, epoch: u64) -> Result<String, GaugeError> {
    let catalog = Catalog::open(store.clone(), Some(epoch)).await?;
    Ok(prometheus(&report(&catalog).await?))
}

/// Samples of one gauge: its labels (`{…}`, or empty) and value; a sample
/// without a value is left out.
type Samples = Vec<(String, Option<f64>)>;

/// Prometheus text for a report.
pub fn prometheus(report: &Report) -> String {
    let mut metrics = Exposition::new();
    let mut gauge = |name: &str, help: &str, samples: Samples| {
        metrics.metric(
            &format!("memweave_memory_{name}"),
            Kind::Gauge,
            help,
            samples,
        );
    };
    let one = |value: Option<f64>| vec![(String::new(), value)];
    let count = |n: u64| Some(n as f64);
    let (overview, density) = (&report.overview, &report.density);
    gauge(
        "epoch",
        "Checkpoint the numbers describe.",
        one(count(report.epoch)),
    );
    gauge(
        "documents",
        "Documents in the tables.",
        one(count(overview.documents)),
    );
    gauge(
        "tokens",
        "Tokens of the documents.",
        one(count(overview.tokens)),
    );
    gauge(
        "entities_per_1k_tokens",
        "Graph entities per 1,000 tokens.",
        one(density.entities_per_1k_tokens),
    );
    gauge(
        "relations_per_1k_tokens",
        "Graph relations per 1,000 tokens.",
        one(density.relations_per_1k_tokens),
    );
    gauge(
        "gist_compression_rate",
        "ReadAgent's compression rate of the gists, percent.",
        one(report.gists.compression_rate),
    );
    gauge(
        "model_tokens_per_corpus_token",
        "Model tokens (in and out) of every call made, per token of the documents.",
        one(report.cost.tokens_per_corpus_token),
    );
    gauge(
        "rows",
        "Rows per table.",
        labelled(&report.rows, |r| [("table", &r.table)], |r| count(r.rows)),
    );
    gauge(
        "stored_bytes",
        "Bytes of each table's files in storage, every version kept.",
        labelled(
            &report.storage,
            |t| [("table", &t.table)],
            |t| count(t.total),
        ),
    );
    let calls = report.calls_per();
    for (by, rows) in [("task", calls.task), ("memory", calls.memory)] {
        let per = |value: fn(&Calls) -> Option<f64>| {
            labelled(&rows, |(name, _)| [(by, *name)], |(_, c)| value(c))
        };
        gauge(
            &format!("{by}_calls"),
            &format!("Model calls paid for, per {by}."),
            per(|c| Some(c.calls as f64)),
        );
        gauge(
            &format!("{by}_cache_hits"),
            &format!("Model calls answered from the cache, per {by}."),
            per(|c| Some(c.cache_hits as f64)),
        );
        gauge(
            &format!("{by}_tokens_per_corpus_token"),
            &format!("Model tokens (in and out) paid for per token of the documents, per {by}."),
            per(|c| c.tokens_per_corpus_token),
        );
        gauge(
            &format!("{by}_tokens"),
            &format!("Model tokens paid for, per {by} and direction."),
            by_direction(
                per(|c| Some(c.tokens_in as f64)),
                per(|c| Some(c.tokens_out as f64)),
            ),
        );
    }
    gauge(
        "errors",
        "Error rows per stage and kind.",
        labelled(
            &report.errors,
            |e| [("stage", &e.stage), ("kind", &e.kind)],
            |e| count(e.errors),
        ),
    );
    let per_tree = |value: fn(&crate::report::TreeShape) -> Option<f64>| {
        labelled(&report.trees, |t| [("tree", &t.tree)], value)
    };
    gauge(
        "tree_nodes",
        "Tree nodes per tree.",
        per_tree(|t| Some(t.nodes as f64)),
    );
    gauge(
        "tree_max_depth",
        "Deepest tree per kind of tree.",
        per_tree(|t| Some(t.max_depth as f64)),
    );
    gauge(
        "tree_mean_fanout",
        "Mean children of a parent node, per tree.",
        per_tree(|t| t.mean_fanout),
    );
    metrics.into_text()
}

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

/// One sample per row: labels named and valued by `labels`, the value by `value`.
fn labelled<'r, R, const N: usize>(
    rows: &'r [R],
    labels: impl Fn(&'r R) -> [(&'r str, &'r str); N],
    value: impl Fn(&'r R) -> Option<f64>,
) -> Samples {
    rows.iter()
        .map(|row| (label_set(&labels(row)), value(row)))
        .collect()
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
