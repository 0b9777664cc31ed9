CREATE TABLE IF NOT EXISTS "My Schema"."we""ird" (
    "Tenant" integer NOT NULL,
    "id" uuid NOT NULL,
    "body" jsonb,
    PRIMARY KEY ("Tenant", "id")
)
