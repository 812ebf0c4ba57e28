package dev.solus.client;

/** The three data RPCs a batch can carry. */
enum Op {
    ADD("Add", true),
    CHECK_ABSENCE("CheckAbsence", false),
    ADD_IF_ABSENT("AddIfAbsent", true);

    final String rpc;
    /** Writes: sent with a request_id so a retry answers what the first attempt answered. */
    final boolean writes;

    Op(String rpc, boolean writes) {
        this.rpc = rpc;
        this.writes = writes;
    }
}
