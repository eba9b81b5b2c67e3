//! `/metrics`: Prometheus text (format 0.0.4) through `prometheus-client`. Requests by endpoint
//! and outcome, prompt and generated tokens, prompt tokens the prefix cache supplied, time to
//! first token and inter-token latency (the HTTP side's clock: request received → token event),
//! and what the engine thread last saw: requests waiting, sequences running, KV pages in use.

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use prometheus_text::CONTENT_TYPE;

pub struct Metrics {
    registry: Registry,
    /// Answered requests by `endpoint` and `status` (HTTP code).
    pub requests: Family<Vec<(String, String)>, Counter>,
    pub prompt_tokens: Counter,
    pub generation_tokens: Counter,
    pub prefix_cache_hit_tokens: Counter,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub waiting: Gauge,
    pub running: Gauge,
    pub kv_pages_in_use: Gauge,
    pub kv_pages_total: Gauge,
    /// 1 once the engine thread stopped on a failure of its own.
    pub engine_failed: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let requests = Family::default();
        let (prompt_tokens, generation_tokens, prefix_cache_hit_tokens) = Default::default();
        // 1 ms … 65 s for the first token (prefill under load), 0.5 ms … 4 s between tokens.
        let time_to_first_token = Histogram::new(exponential_buckets(1e-3, 2.0, 17));
        let inter_token_latency = Histogram::new(exponential_buckets(5e-4, 2.0, 14));
        let (waiting, running, kv_pages_in_use, kv_pages_total, engine_failed) = Default::default();
        let mut registry = Registry::with_prefix("fak");
        registry.register(
            "requests",
            "Requests answered, by endpoint and HTTP status",
            Family::clone(&requests),
        );
        registry.register(
            "prompt_tokens",
            "Prompt tokens of generation requests admitted",
            Counter::clone(&prompt_tokens),
        );
        registry.register(
            "generation_tokens",
            "Tokens generated and delivered",
            Counter::clone(&generation_tokens),
        );
        registry.register(
            "prefix_cache_hit_tokens",
            "Prompt tokens whose KV came from the prefix cache",
            Counter::clone(&prefix_cache_hit_tokens),
        );
        registry.register(
            "time_to_first_token_seconds",
            "Request received to its first token known to the server",
            time_to_first_token.clone(),
        );
        registry.register(
            "inter_token_latency_seconds",
            "Gap between consecutive tokens of a request",
            inter_token_latency.clone(),
        );
        registry.register(
            "requests_waiting",
            "Requests queued for a sequence (the scheduler's queue depth)",
            Gauge::clone(&waiting),
        );
        registry.register(
            "requests_running",
            "Sequences in flight",
            Gauge::clone(&running),
        );
        registry.register(
            "kv_pages_in_use",
            "KV pages held by sequences and the prefix cache",
            Gauge::clone(&kv_pages_in_use),
        );
        registry.register(
            "kv_pages",
            "KV pages in the pool",
            Gauge::clone(&kv_pages_total),
        );
        registry.register(
            "engine_failed",
            "1 once the engine stopped on a failure of its own",
            Gauge::clone(&engine_failed),
        );
        Metrics {
            registry,
            requests,
            prompt_tokens,
            generation_tokens,
            prefix_cache_hit_tokens,
            time_to_first_token,
            inter_token_latency,
            waiting,
            running,
            kv_pages_in_use,
            kv_pages_total,
            engine_failed,
        }
    }

    pub fn count_request(&self, endpoint: &str, status: u16) {
        let labels = vec![
            ("endpoint".to_string(), endpoint.to_string()),
            ("status".to_string(), status.to_string()),
        ];
        self.requests.get_or_create(&labels).inc();
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut text, &self.registry);
        text
    }
}
