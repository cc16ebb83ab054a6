-- fanout._check_name(p_kind, p_name): validates a user-supplied name (topic,
-- group, consumer). Names are data, never identifiers, so quotes, semicolons
-- and any printable character are fine. A name that is blank once white
-- space and invisible format characters (U+00A0, U+200B..U+200F, U+2028,
-- U+2029, U+2060.., U+FEFF, ...) are removed is refused. Confusable letters
-- of different scripts (Latin 'a' and Cyrillic 'а') are not detected: a
-- known limit (README, "Security and multi-tenancy").
-- Raises: PGQ03 when NULL, PGQ04 when empty or blank, over 512 characters, or
-- with control characters. Returns the name in NFC (fanout._nfc); callers
-- that store or look up a name use that. Touches no table.
CREATE OR REPLACE FUNCTION fanout._check_name(p_kind text, p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_name IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', p_kind USING ERRCODE = 'PGQ03';
    END IF;
    IF regexp_replace(p_name, '[[:space:]\u0085\u00A0\u00AD\u034F\u061C\u115F\u1160\u1680\u17B4\u17B5\u180B-\u180E\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\u3164\uFE00-\uFE0F\uFEFF\uFFA0]', '', 'g') = '' THEN
        RAISE EXCEPTION '% must not be empty', p_kind USING ERRCODE = 'PGQ04';
    END IF;
    IF char_length(p_name) > 512 THEN
        RAISE EXCEPTION '% is % characters long; the limit is 512', p_kind, char_length(p_name)
            USING ERRCODE = 'PGQ04';
    END IF;
    IF p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION '% must not contain control characters', p_kind USING ERRCODE = 'PGQ04';
    END IF;
    RETURN fanout._nfc(p_name);
END
$fn$;
