//! `fak serve`: an OpenAI-compatible HTTP server. axum on tokio answers HTTP; the engine lives on
//! a thread of its own ([`engine`]) that runs the shared continuous-batching scheduler
//! (`fak::runtime::scheduler`): requests join and leave between decode steps, share the prefix
//! cache, and wait first come, first served when every sequence is busy. SIGTERM (or Ctrl-C)
//! drains: new requests get 503, those in flight finish, then the process exits.

mod api;
mod engine;
pub use engine::StepTraceFile;
mod error;
mod generate;
mod handlers;
mod metrics;
mod text;

use crate::flag_values::{count, parse_bytes, tokens};
use anyhow::{Context, Result};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use engine::EngineThread;
use fak::runtime::EngineOptions;
use generate::App;
use metrics::Metrics;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(long)]
    pub model: PathBuf,
    /// The name clients give as `model` (default: the file name without `.gguf`).
    #[arg(long)]
    pub model_name: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// KV-cache length per sequence (default: min(training context, 4096)).
    #[arg(long, value_parser = tokens(1))]
    pub max_context: Option<usize>,
    /// Sequences decoded together (one batched step serves them all); more requests queue.
    #[arg(long, default_value_t = 4)]
    pub max_seqs: usize,
    /// Requests that may wait for a sequence; past that a request gets 429.
    #[arg(long, default_value_t = 64, value_parser = count(0))]
    pub max_queue: usize,
    /// GPU memory for the prefix cache shared by all requests (bytes, or with a K, M or G
    /// suffix); 0 turns it off.
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    pub cache_mem: u64,
    /// Token slots per KV page (the prefix cache shares whole pages); default the engine's.
    #[arg(long)]
    pub page_size: Option<u32>,
    /// Prompt tokens prefilled between two decode steps (at least one prefill step; a hybrid
    /// model's in whole 64-token chunks), several requests' prompts together in one step: a long
    /// prompt is prefilled a part per step, so the sequences already decoding wait about this
    /// many tokens' prefill between two tokens (up to half as many more where that ends the
    /// prompt the budget would cut).
    #[arg(long, default_value_t = 512, value_parser = tokens(1))]
    pub prefill_budget: usize,
    /// Largest request body accepted (bytes, or with a K, M or G suffix).
    #[arg(long, default_value = "4M", value_parser = parse_bytes)]
    pub max_body: u64,
    /// Write the scheduler's step trace to this file: one JSON line per forward step (its kind,
    /// host start and end in ns since the server started, each sequence's request, positions
    /// and snapshots, the tick's queue counts) and per request submitted, admitted and started
    /// (`fak::runtime::trace`). Host timestamps only: cheap enough for a benchmark.
    #[arg(long)]
    pub trace_steps: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let started = std::time::Instant::now();
    let mut options = EngineOptions::from_env()?;
    options.max_context = args.max_context;
    options.cache_mem = args.cache_mem;
    options.max_seqs = args.max_seqs;
    if let Some(page) = args.page_size {
        options.page_size = page;
    }
    let model_name = args.model_name.clone().unwrap_or_else(|| {
        args.model
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned())
    });
    let metrics = Arc::new(Metrics::new());
    let trace = match &args.trace_steps {
        Some(path) => Some(engine::StepTraceFile::create(path, started)?),
        None => None,
    };
    let (engine, loaded) = EngineThread::spawn(
        args.model.clone(),
        options,
        args.prefill_budget,
        trace,
        metrics.clone(),
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let commands = engine.commands.clone();
    let result = runtime.block_on(async {
        let addr: SocketAddr = format!("{}:{}", args.host, args.port)
            .parse()
            .with_context(|| format!("--host {} --port {}", args.host, args.port))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let app = Arc::new(App::new(
            commands,
            loaded,
            model_name,
            metrics,
            args.max_queue,
        ));
        let loaded = &app.loaded;
        eprintln!(
            "fak serve: {} as {:?} on {} ({} sequences of {} tokens, {} KV pages of {}) at http://{}",
            args.model.display(),
            app.model_name,
            loaded.adapter,
            loaded.max_seqs,
            loaded.max_context,
            loaded.kv_pages,
            loaded.page_size,
            listener.local_addr()?
        );
        let body_limit = usize::try_from(args.max_body).unwrap_or(usize::MAX);
        let router = Router::new()
            .route("/v1/chat/completions", post(handlers::chat))
            .route("/v1/completions", post(handlers::completions))
            .route("/v1/models", get(handlers::models))
            .route("/health", get(handlers::health))
            .route("/metrics", get(handlers::metrics))
            .fallback(handlers::not_found)
            .layer(DefaultBodyLimit::max(body_limit))
            .with_state(app.clone());
        let draining = app.clone();
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown_signal().await;
                eprintln!("fak serve: draining (new requests get 503)");
                draining.draining.store(true, Ordering::SeqCst);
            })
            .await
            .context("serving HTTP")
    });
    // Every request is answered: the engine thread ends once its channel closes.
    drop(runtime);
    engine.join();
    result
}

/// SIGTERM (where there are signals) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
