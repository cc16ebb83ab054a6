-- fanout._check_name(p_kind, p_name): validates a user-supplied name (topic,
-- group, consumer). Names are data, never identifiers, so quotes, semicolons
-- and any printable character are fine. A name that is blank once white
-- space and invisible format characters (U+00A0, U+200B..U+200F, U+2028,
-- U+2029, U+2060.., U+FEFF, ...) are removed is refused. Confusable letters
-- of different scripts (Latin 'a' and Cyrillic 'а') are not detected: a
-- known limit (README, "Security and multi-tenancy").
-- The name is put in NFC (fanout._nfc) first and every check runs on that
-- form, so the length counted is the length stored (512 x U+1D160 becomes
-- 1,536 characters in NFC) and no check sees another string than the one
-- that is stored or compared.
-- Raises: PGQ03 when NULL, PGQ04 when empty or blank, over 512 characters, or
-- with control characters. Returns the name in NFC; callers that store, look
-- up or authorize a name use that. Touches no table.
CREATE OR REPLACE FUNCTION fanout._check_name(p_kind text, p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_name text;
BEGIN
    IF p_name IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', p_kind USING ERRCODE = 'PGQ03';
    END IF;
    -- A name far over the limit is refused before it is normalized: NFC
    -- composes at most 4 characters into one (a canonical decomposition is
    -- at most 4 long: U+1F82), so over 2,048 it cannot fit in NFC either.
    IF char_length(p_name) > 512 * 4 THEN
        RAISE EXCEPTION '% is % characters long; the limit is 512', p_kind, char_length(p_name)
            USING ERRCODE = 'PGQ04';
    END IF;
    v_name := fanout._nfc(p_name);
    IF regexp_replace(v_name, '[[:space:]\u0085\u00A0\u00AD\u034F\u061C\u115F\u1160\u1680\u17B4\u17B5\u180B-\u180E\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\u3164\uFE00-\uFE0F\uFEFF\uFFA0]', '', 'g') = '' THEN
        RAISE EXCEPTION '% must not be empty', p_kind USING ERRCODE = 'PGQ04';
    END IF;
    IF char_length(v_name) > 512 THEN
        RAISE EXCEPTION '% is % characters long in Unicode NFC; the limit is 512', p_kind, char_length(v_name)
            USING ERRCODE = 'PGQ04';
    END IF;
    IF v_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION '% must not contain control characters', p_kind USING ERRCODE = 'PGQ04';
    END IF;
    RETURN v_name;
END
$fn$;
