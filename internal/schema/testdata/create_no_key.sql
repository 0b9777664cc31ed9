CREATE TABLE IF NOT EXISTS "public"."log" (
    "line" text
)
