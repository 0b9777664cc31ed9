CREATE TABLE IF NOT EXISTS "public"."orders" (
    "id" bigint NOT NULL,
    "customer" character varying(40),
    "amount" numeric(12,2) NOT NULL,
    "tags" text[],
    "total" numeric GENERATED ALWAYS AS ((amount * 1.2)) STORED,
    PRIMARY KEY ("id")
)
