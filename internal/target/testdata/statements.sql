-- update keeping its key, all columns
WITH m AS (UPDATE ONLY "public"."Items" SET "name" = $1, "body" = $2, "doc" = $3 WHERE "id" OPERATOR(pg_catalog.=) $4 RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: new.name new.body new.doc new.id

-- update keeping its key, body unchanged TOAST
WITH m AS (UPDATE ONLY "public"."Items" SET "name" = $1, "doc" = $2 WHERE "id" OPERATOR(pg_catalog.=) $3 RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: new.name new.doc new.id

-- update with only unchanged non-key columns (no-op)
-- (no statement)

-- key-changing update ('K' old tuple)
WITH m AS (UPDATE ONLY "public"."Items" SET "id" = $1, "name" = $2, "doc" = $3 WHERE "id" OPERATOR(pg_catalog.=) $4 RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: new.id new.name new.doc old.id

-- delete by key
WITH m AS (DELETE FROM ONLY "public"."Items" WHERE "id" OPERATOR(pg_catalog.=) $1 RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: old.id

-- FULL identity update
WITH m AS (UPDATE ONLY "public"."Items" SET "id" = $1, "name" = $2, "doc" = $3 WHERE ctid = (SELECT ctid FROM ONLY "public"."Items" WHERE ("id" OPERATOR(pg_catalog.=) $4 OR "id" IS NULL AND $4 IS NULL) AND ("name" OPERATOR(pg_catalog.=) $5 OR "name" IS NULL AND $5 IS NULL) AND "doc"::text IS NOT DISTINCT FROM $6 ORDER BY ("id"::text IS NOT DISTINCT FROM $4::text AND "name"::text IS NOT DISTINCT FROM $5::text AND "doc"::text IS NOT DISTINCT FROM $6::text) DESC LIMIT 1) RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: new.id new.name new.doc old.id old.name old.doc

-- FULL identity delete
WITH m AS (DELETE FROM ONLY "public"."Items" WHERE ctid = (SELECT ctid FROM ONLY "public"."Items" WHERE ("id" OPERATOR(pg_catalog.=) $1 OR "id" IS NULL AND $1 IS NULL) AND ("name" OPERATOR(pg_catalog.=) $2 OR "name" IS NULL AND $2 IS NULL) AND ("body" OPERATOR(pg_catalog.=) $3 OR "body" IS NULL AND $3 IS NULL) AND "doc"::text IS NOT DISTINCT FROM $4 ORDER BY ("id"::text IS NOT DISTINCT FROM $1::text AND "name"::text IS NOT DISTINCT FROM $2::text AND "body"::text IS NOT DISTINCT FROM $3::text AND "doc"::text IS NOT DISTINCT FROM $4::text) DESC LIMIT 1) RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: old.id old.name old.body old.doc

-- FULL identity delete on a partitioned table
WITH m AS (DELETE FROM "public"."Items" WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM "public"."Items" WHERE ("id" OPERATOR(pg_catalog.=) $1 OR "id" IS NULL AND $1 IS NULL) AND ("name" OPERATOR(pg_catalog.=) $2 OR "name" IS NULL AND $2 IS NULL) AND ("body" OPERATOR(pg_catalog.=) $3 OR "body" IS NULL AND $3 IS NULL) AND "doc"::text IS NOT DISTINCT FROM $4 ORDER BY ("id"::text IS NOT DISTINCT FROM $1::text AND "name"::text IS NOT DISTINCT FROM $2::text AND "body"::text IS NOT DISTINCT FROM $3::text AND "doc"::text IS NOT DISTINCT FROM $4::text) DESC LIMIT 1) RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m;
-- params: old.id old.name old.body old.doc

-- insert COPY header (generated target column left out)
COPY "public"."Items" ("id", "name", "body", "doc") FROM STDIN;

-- insert of one row, for a few rows at commit (generated target column left out)
INSERT INTO "public"."Items" ("id", "name", "body", "doc") VALUES ($1, $2, $3, $4);

-- truncate
TRUNCATE "public"."a";
TRUNCATE "public"."a", "s"."b";
TRUNCATE "public"."a" RESTART IDENTITY;
