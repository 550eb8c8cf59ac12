"""Flight Recorder entries as OpenTelemetry spans, and back.

``model`` names every attribute and derives the trace and span ids; ``plan`` says which
attribute comes from which column; ``encode`` (protobuf classes) and ``wire`` (protobuf
wire format straight from the columns) build OTLP requests from canonical rows;
``transport`` picks the exporter, gRPC (``grpc_exporter``) or HTTP (``http_exporter``),
that makes one attempt at one request (``payload``; ``exporter``: the attempt's outcome),
``delivery`` retries and splits (``split``) within a deadline (``repeats`` collapses its
warnings while a receiver stays down) and ``spool`` keeps what could not be sent;
``jsonfile`` and ``jaegerjson`` write OTLP JSON lines and Jaeger JSON; ``verdict`` adds
the analyzer's findings as spans; ``otlp_import`` reads spans back into rows.
"""
