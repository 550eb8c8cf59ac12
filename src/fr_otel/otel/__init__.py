"""Flight Recorder entries as OpenTelemetry spans, and back.

``model`` names every attribute and derives the trace and span ids; ``plan`` says which
attribute comes from which column; ``encode`` (protobuf classes) and ``wire`` (protobuf
wire format straight from the columns) build OTLP requests from canonical rows;
``transport`` sends them over gRPC or HTTP (``repeats`` collapses its warnings while a
receiver stays down) and ``spool`` keeps what could not be sent;
``jsonfile`` and ``jaegerjson`` write OTLP JSON lines and Jaeger JSON; ``verdict`` adds
the analyzer's findings as spans; ``otlp_import`` reads spans back into rows.
"""
