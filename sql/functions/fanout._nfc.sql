-- fanout._nfc(p_name): a name in Unicode normalization form C, so that the
-- composed and decomposed spellings of one name (e.g. 'é' as U+00E9 or as
-- 'e' + U+0301) are the same topic or group, never two look-alikes. Names are
-- stored in NFC and looked up in NFC. Databases not in UTF8 get the name
-- unchanged (normalize() needs UTF8). (plpgsql: a SQL function with SET is
-- planned again on every call.) Touches no table.
CREATE OR REPLACE FUNCTION fanout._nfc(p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN CASE WHEN p_name IS NULL OR getdatabaseencoding() <> 'UTF8' OR p_name IS NFC NORMALIZED THEN p_name
                ELSE normalize(p_name, NFC) END;
END
$fn$;
