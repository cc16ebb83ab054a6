-- fanout._page_fit(p_sizes, p_budget, p_first): how many rows of a page
-- (their sizes in order, p_sizes) fit in p_budget bytes, as a prefix; with
-- p_first (the page is still empty) the first row always comes, whatever
-- its size, so no message can make a page impossible. fanout._window_walk
-- calls it only when the page's rows together exceed the budget.
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._page_fit(p_sizes int[], p_budget bigint, p_first boolean)
RETURNS int
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_keep int := 0;
    v_run  bigint := 0;
    v_s    int;
BEGIN
    FOREACH v_s IN ARRAY coalesce(p_sizes, '{}') LOOP
        EXIT WHEN v_run + v_s > p_budget AND NOT (v_keep = 0 AND p_first);
        v_run := v_run + v_s;
        v_keep := v_keep + 1;
    END LOOP;
    RETURN v_keep;
END
$fn$;
