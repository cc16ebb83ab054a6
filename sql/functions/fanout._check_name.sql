-- fanout._check_name(p_kind, p_name): validates a user-supplied name (topic,
-- group, consumer). Names are data, never identifiers, so quotes, semicolons
-- and any printable character are fine.
-- Raises: PGQ03 when NULL, PGQ04 when empty, over 512 characters, or with
-- control characters. Returns the name unchanged. Touches no table.
CREATE OR REPLACE FUNCTION fanout._check_name(p_kind text, p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_name IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', p_kind USING ERRCODE = 'PGQ03';
    END IF;
    IF btrim(p_name) = '' THEN
        RAISE EXCEPTION '% must not be empty', p_kind USING ERRCODE = 'PGQ04';
    END IF;
    IF char_length(p_name) > 512 THEN
        RAISE EXCEPTION '% is % characters long; the limit is 512', p_kind, char_length(p_name)
            USING ERRCODE = 'PGQ04';
    END IF;
    IF p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION '% must not contain control characters', p_kind USING ERRCODE = 'PGQ04';
    END IF;
    RETURN p_name;
END
$fn$;
