// Package store is kbgen serve's memory of the fleet across restarts: the
// runs it saw end (queue, outcome, waits) and each attempt's run facts
// (agent, exit, noise), the roster of agents, and later ledgers, in one
// SQL database. Embedded SQLite (modernc.org/sqlite, pure Go: the static
// kbgen stays static) by default, in a file named for the service;
// PostgreSQL (jackc/pgx) by DSN for hosts whose disk does not survive a
// redeploy. Migrations are numbered and run once, in a transaction;
// Prune keeps Retention. A database records the service that made it and
// refuses another, so two services never share one by accident.
package store
