// Package provision is the base of what repstream installs in the
// databases it touches, and the checks that make that safe: the schema
// repstream on either side, who may own it and what is in it, the lock that
// serialises installing and removing it, and the refusal to replicate a
// database into itself. What repstream makes on that base (the
// publication, the event trigger, the target tables) and removes again is
// package install; target's state and install both build on this one.
//
// repstream runs with high privileges on two production databases, and its
// sessions call functions in its own schema (the source's event trigger, the
// target's repstream.expect_row on every replicated UPDATE and DELETE). A
// schema another role could create first, or write into, would be a way to
// run that role's code with repstream's privileges. So:
//
//   - the schema is created by repstream with AUTHORIZATION of the installing
//     role and no privileges for PUBLIC;
//   - a schema repstream that exists already is used only if it, and every
//     object in it, is owned by the installing role or by a superuser, and no
//     other role may create in it or write to its tables (EnsureSchema,
//     CheckSchema, with an error that names the offending object and owner);
//   - installing and removing run under one transaction-scoped advisory lock
//     (Lock), so that two first starts or a start and a drop do not race.
//
// Files:
//
//	doc.go     this overview
//	schema.go  Lock, EnsureSchema, CheckSchema, DropSchemaIfEmpty: the schema repstream and its owner checks
//	same.go    Identify, SameDatabase: a database's identity, and the source = target refusal
package provision
