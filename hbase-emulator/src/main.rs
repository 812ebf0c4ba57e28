//! `hbase-emulator`: run the HBase Thrift1 server until killed (in memory,
//! or persisted in a data directory with `--data-dir`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use hbase_emulator::{DEFAULT_IDLE_TIMEOUT, Emulator, Protocol, Transport};

const USAGE: &str = "\
usage: hbase-emulator [--listen ADDR] [--framed] [--compact] [--latency-ms N]
                      [--idle-timeout-secs N] [--data-dir DIR [--fsync]]

  --listen ADDR     address to listen on (default 127.0.0.1:9090)
  --framed          framed transport (hbase.regionserver.thrift.framed=true)
  --compact         compact protocol (hbase.regionserver.thrift.compact=true)
  --latency-ms N    delay added before every call
  --idle-timeout-secs N
                    close connections idle this long (default 60, as
                    hbase.thrift.server.socket.read.timeout; 0 = never)
  --data-dir DIR    keep tables and cells in DIR (write-ahead log DIR/wal.log,
                    replayed on start): they survive kill -9 and restarts.
                    Default: in memory only, lost when the process exits
  --fsync           with --data-dir: fdatasync every log record (survives a
                    machine crash too; slower)
";

struct Args {
    listen: String,
    transport: Transport,
    protocol: Protocol,
    latency: Duration,
    idle_timeout: Option<Duration>,
    data_dir: Option<PathBuf>,
    fsync: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        listen: "127.0.0.1:9090".to_owned(),
        transport: Transport::Buffered,
        protocol: Protocol::Binary,
        latency: Duration::ZERO,
        idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        data_dir: None,
        fsync: false,
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--listen" => parsed.listen = value("--listen")?,
            "--framed" => parsed.transport = Transport::Framed,
            "--compact" => parsed.protocol = Protocol::Compact,
            "--latency-ms" => {
                let ms = value("--latency-ms")?;
                let ms: u64 = ms.parse().map_err(|_| format!("--latency-ms: not a number: {ms}"))?;
                parsed.latency = Duration::from_millis(ms);
            }
            "--idle-timeout-secs" => {
                let secs = value("--idle-timeout-secs")?;
                let secs: u64 = secs
                    .parse()
                    .map_err(|_| format!("--idle-timeout-secs: not a number: {secs}"))?;
                parsed.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "--data-dir" => parsed.data_dir = Some(PathBuf::from(value("--data-dir")?)),
            "--fsync" => parsed.fsync = true,
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    if parsed.fsync && parsed.data_dir.is_none() {
        return Err("--fsync needs --data-dir".into());
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(raw.into_iter()) {
        Ok(args) => args,
        Err(e) => {
            eprint!("hbase-emulator: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut builder = Emulator::builder()
        .transport(args.transport)
        .protocol(args.protocol)
        .latency(args.latency)
        .idle_timeout(args.idle_timeout)
        .fsync(args.fsync);
    if let Some(dir) = &args.data_dir {
        builder = builder.data_dir(dir);
    }
    let emulator = match builder.start(&args.listen) {
        Ok(emulator) => emulator,
        Err(e) => {
            match &args.data_dir {
                Some(dir) => eprintln!(
                    "hbase-emulator: cannot start on {} with data in {}: {e}",
                    args.listen,
                    dir.display()
                ),
                None => eprintln!("hbase-emulator: cannot listen on {}: {e}", args.listen),
            }
            return ExitCode::FAILURE;
        }
    };
    if let (Some(dir), Some(stats)) = (&args.data_dir, emulator.replayed()) {
        println!(
            "hbase-emulator data in {}: replayed {} log records{}{}",
            dir.display(),
            stats.frames,
            if stats.torn_bytes > 0 {
                format!(", dropped a torn last record ({} bytes)", stats.torn_bytes)
            } else {
                String::new()
            },
            if stats.compacted { ", log compacted" } else { "" }
        );
    }
    let transport = match args.transport {
        Transport::Buffered => "buffered",
        Transport::Framed => "framed",
    };
    let protocol = match args.protocol {
        Protocol::Binary => "binary",
        Protocol::Compact => "compact",
    };
    println!(
        "hbase-emulator listening on {} ({transport} transport, {protocol} protocol, latency {} ms); Solus needs \
         storage.hbase.transport = \"{transport}\" and storage.hbase.protocol = \"{protocol}\"",
        emulator.addr(),
        args.latency.as_millis()
    );
    // The accept loop runs on its own thread; keep the handle alive forever.
    loop {
        thread::park();
    }
}
