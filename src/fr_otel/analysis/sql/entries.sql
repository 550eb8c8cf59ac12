-- Every row of the archive registered as src, in the canonical schema: fr-otel sql's
-- `entries` view.
CREATE OR REPLACE VIEW entries AS SELECT * FROM src
