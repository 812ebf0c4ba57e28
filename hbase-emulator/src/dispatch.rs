//! Per-call dispatch: count the call, add latency, inject failures, then hand
//! it to the generated processor.

use std::sync::Arc;
use std::thread;

use hbase_thrift::hbase::{HbaseSyncHandler, HbaseSyncProcessor, IOError};
use thrift::protocol::{TInputProtocol, TOutputProtocol};
use thrift::server::TProcessor;
use thrift::{ApplicationError, ApplicationErrorKind};

use crate::faults::Faults;
use crate::handler::Handler;
use crate::wire::{
    ReplayInput, application_exception, io_error_reply, read_create_table_args, skip_args, write_create_table_reply,
};

/// Every call of the Thrift1 `Hbase` service, in IDL order.
pub const CALLS: [&str; 49] = [
    "enableTable",
    "disableTable",
    "isTableEnabled",
    "compact",
    "majorCompact",
    "getTableNames",
    "getTableNamesWithIsTableEnabled",
    "getColumnDescriptors",
    "getTableRegions",
    "createTable",
    "deleteTable",
    "get",
    "getVer",
    "getVerTs",
    "getRow",
    "getRowWithColumns",
    "getRowTs",
    "getRowWithColumnsTs",
    "getRows",
    "getRowsWithColumns",
    "getRowsTs",
    "getRowsWithColumnsTs",
    "mutateRow",
    "mutateRowTs",
    "mutateRows",
    "mutateRowsTs",
    "atomicIncrement",
    "deleteAll",
    "deleteAllTs",
    "deleteAllRow",
    "increment",
    "incrementRows",
    "deleteAllRowTs",
    "scannerOpenWithScan",
    "scannerOpen",
    "scannerOpenWithStop",
    "scannerOpenWithPrefix",
    "scannerOpenTs",
    "scannerOpenWithStopTs",
    "scannerGet",
    "scannerGetList",
    "scannerClose",
    "getRegionInfo",
    "append",
    "checkAndPut",
    "getThriftServerType",
    "getClusterId",
    "grant",
    "revoke",
];

pub(crate) struct Dispatcher {
    processor: HbaseSyncProcessor<Handler>,
    /// A second handler over the same store: `createTable` is decoded here.
    create_handler: Handler,
    faults: Arc<Faults>,
}

impl Dispatcher {
    pub fn new(processor_handler: Handler, create_handler: Handler, faults: Arc<Faults>) -> Self {
        Self {
            processor: HbaseSyncProcessor::new(processor_handler),
            create_handler,
            faults,
        }
    }

    /// Serves one call; an error means the connection is unusable.
    pub fn serve_call(&self, i_prot: &mut dyn TInputProtocol, o_prot: &mut dyn TOutputProtocol) -> thrift::Result<()> {
        let header = i_prot.read_message_begin()?;
        let seq = header.sequence_number;
        let call = header.name.clone();
        self.faults.record_call(&call);
        let latency = self.faults.latency();
        if !latency.is_zero() {
            thread::sleep(latency);
        }
        if let Some(delay) = self.faults.take_delay(&call) {
            thread::sleep(delay);
        }
        // The generated processor would leave an unknown call's arguments
        // unread and desynchronise the stream; answer it here instead.
        if !CALLS.contains(&call.as_str()) {
            skip_args(i_prot)?;
            let error = ApplicationError::new(
                ApplicationErrorKind::UnknownMethod,
                format!("Invalid method name: '{call}'"),
            );
            return application_exception(o_prot, &call, seq, &error);
        }
        if let Some(message) = self.faults.row_access_denial(&call) {
            skip_args(i_prot)?;
            return io_error_reply(o_prot, &call, seq, &IOError::new(message, false));
        }
        if self.faults.take_failure(&call) {
            skip_args(i_prot)?;
            let error = IOError::new(format!("hbase-emulator: injected failure of {call} (fail_next)"), true);
            return io_error_reply(o_prot, &call, seq, &error);
        }
        if call == "createTable" {
            let (name, families) = read_create_table_args(i_prot)?;
            let result = self.create_handler.handle_create_table(name, families);
            return write_create_table_reply(o_prot, seq, result);
        }
        self.processor.process(&mut ReplayInput::new(header, i_prot), o_prot)
    }
}
