"""A finished, failed unary call as grpcio hands it to the caller (an ``RpcError`` that is also
the call and its future): what the tests' interceptors return for an answer the server refused or
one lost on the way back."""
import grpc


class FailedCall(grpc.RpcError, grpc.Call, grpc.Future):
    def __init__(self, code, details, trailing_metadata=None, initial_metadata=None):
        self._code, self._details = code, details
        self._trailing, self._initial = trailing_metadata, initial_metadata

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing

    def initial_metadata(self):
        return self._initial

    def result(self, timeout=None):
        raise self

    def exception(self, timeout=None):
        return self

    def traceback(self, timeout=None):
        return None

    def add_done_callback(self, fn):
        fn(self)

    def cancel(self):
        return False

    def cancelled(self):
        return False

    def running(self):
        return False

    def done(self):
        return True

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def add_callback(self, callback):
        return False
