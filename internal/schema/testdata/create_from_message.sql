CREATE SCHEMA IF NOT EXISTS "app";
CREATE SEQUENCE IF NOT EXISTS app.n_id_seq;
CREATE TABLE IF NOT EXISTS "app"."n" (
    "id" integer DEFAULT nextval('app.n_id_seq'::regclass) NOT NULL,
    "v" character varying(10),
    PRIMARY KEY ("id")
);
ALTER SEQUENCE app.n_id_seq OWNED BY "app"."n"."id";
