//! The integration suite against the HBase backend, through the in-process
//! HBase emulator, plus what only HBase has: the exact cells an independent
//! Thrift client sees, legacy markers, Thrift calls per request, and faults.

mod common;
mod hbase_cases;
mod suite;

use common::TestBackend;

backend_suite!(TestBackend::hbase();
    admin_create_get_list_update,
    admin_errors,
    data_add_check_add_if_absent,
    data_errors,
    concurrent_add_if_absent_is_atomic,
    ttl_expiry,
    expiry_never_moves_backwards,
    restart_keeps_data,
    false_positive_rate_at_design_load,
    replay_npm_events,
    health_and_reflection,
);
