"""The Kafka protocol client: a bounded component, usable and testable on its own.

Owns: txkafka's own connections (``connection``: TLS from ``tls`` and ``keystores``, SASL PLAIN,
SCRAM and OAUTHBEARER with ``oauthbearer`` tokens, API versions), the protocol's primitives
(``protocol``) and error codes (``error_codes``), Metadata (``metadata``), Fetch (``fetcher``,
record batches decoded by ``record_batch_decoder``), Produce (``producer``, batches encoded by
``record_batch_encoder``), the transaction APIs (``transactions``), the ``kafka.*`` settings as
librdkafka and these connections apply them (``config``), and librdkafka's failures as typed
errors (``librdkafka_errors``).

May import: the shared modules of ``txkafka.connector`` (errors, option_names,
secrets_redaction). Never the source, the sink, the checkpoint package or pyspark: callers pass
what it needs as plain settings (a librdkafka-style config mapping, ``SecurityConfig``, time-outs).
"""
