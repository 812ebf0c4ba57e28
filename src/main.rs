//! `solus` binary: parses the command line and runs the server or a client command.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use solus::cli::{Cli, Command};
use solus::config::Settings;
use tracing_subscriber::EnvFilter;

fn init_logging(level: &str, json: bool) {
    // fjall and lsm-tree log every table flush at info: keep them to warnings.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},fjall=warn,lsm_tree=warn")));
    // Colour only on a terminal (never in a file or a pipe), and not with NO_COLOR.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when first polled, so a signal during start-up (e.g. a long
/// journal replay) still ends in a clean shutdown instead of killing the process.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("installing the SIGTERM handler: {e}"))?;
    #[cfg(unix)]
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("installing the SIGINT handler: {e}"))?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    })
}

async fn serve(config: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let settings = Settings::load(config.as_deref())?;
    init_logging(&settings.log.level, settings.log.json);
    for warning in solus::config::environment_warnings(std::env::vars()) {
        tracing::warn!("{warning}");
    }
    for warning in settings.warnings() {
        tracing::warn!("{warning}");
    }
    let listener = match tokio::net::TcpListener::bind(settings.server.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            let error = solus::config::bind_error("server.listen", settings.server.listen, &e);
            // Say at once when the metrics port is taken too: one restart instead of two.
            let metrics = match settings.metrics.listen.parse::<std::net::SocketAddr>() {
                Ok(addr) => std::net::TcpListener::bind(addr)
                    .err()
                    .map(|e| solus::config::bind_error("metrics.listen", addr, &e)),
                Err(_) => None,
            };
            return Err(match metrics {
                Some(m) => anyhow::anyhow!("{error}\nerror: {m}"),
                None => error,
            });
        }
    };
    solus::server::serve(settings, listener, shutdown_signal()?).await
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `bench` shares the machine with the server it measures: one thread
    // drives its few requests in flight without cross-thread wake-ups.
    let mut builder = if matches!(cli.command, Command::Bench(_)) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    // Storage calls run on the blocking pool (see its size's doc comment).
    let runtime = builder
        .enable_all()
        .max_blocking_threads(solus::engine::lanes::BLOCKING_THREADS)
        .build();
    match runtime {
        Ok(rt) => rt.block_on(run(cli)),
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Serve { config } => serve(config).await,
        other => {
            init_logging("warn", false);
            solus::cli::run(other).await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
