/*
 * The part of SQLite's C interface package sqlquery uses, declared here
 * from the documented, stable ABI (https://sqlite.org/c3ref/intro.html),
 * as package sqlitevfs declares its part, so the package does not depend
 * on where a driver keeps its copy of sqlite3.h. The functions come from
 * the SQLite library github.com/mattn/go-sqlite3 links into the program
 * (package sqlitevfs imports it, and registers the chunkd VFS there).
 */
#ifndef CHUNKD_SQLQUERY_SQLITE_H
#define CHUNKD_SQLQUERY_SQLITE_H

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef long long sqlite3_int64;

int sqlite3_open_v2(const char *filename, sqlite3 **ppDb, int flags, const char *zVfs);
int sqlite3_close_v2(sqlite3 *);
int sqlite3_extended_result_codes(sqlite3 *, int onoff);
int sqlite3_limit(sqlite3 *, int id, int newVal);
int sqlite3_set_authorizer(sqlite3 *, int (*xAuth)(void *, int, const char *, const char *, const char *, const char *), void *pUserData);
int sqlite3_prepare_v3(sqlite3 *db, const char *zSql, int nByte, unsigned int prepFlags, sqlite3_stmt **ppStmt, const char **pzTail);
int sqlite3_stmt_readonly(sqlite3_stmt *);
int sqlite3_bind_parameter_count(sqlite3_stmt *);
const char *sqlite3_bind_parameter_name(sqlite3_stmt *, int);
int sqlite3_bind_null(sqlite3_stmt *, int);
int sqlite3_bind_int64(sqlite3_stmt *, int, sqlite3_int64);
int sqlite3_bind_double(sqlite3_stmt *, int, double);
int sqlite3_column_count(sqlite3_stmt *);
const char *sqlite3_column_name(sqlite3_stmt *, int);
const char *sqlite3_column_decltype(sqlite3_stmt *, int);
int sqlite3_finalize(sqlite3_stmt *);
int sqlite3_reset(sqlite3_stmt *);
int sqlite3_clear_bindings(sqlite3_stmt *);
void sqlite3_interrupt(sqlite3 *);
int sqlite3_extended_errcode(sqlite3 *);
const char *sqlite3_errmsg(sqlite3 *);
const char *sqlite3_errstr(int);
int sqlite3_error_offset(sqlite3 *);

/* Result codes (https://sqlite.org/rescode.html). */
#define CHUNKD_SQLITE_OK 0
#define CHUNKD_SQLITE_ROW 100
#define CHUNKD_SQLITE_DONE 101

/* Limits (https://sqlite.org/c3ref/c_limit_attached.html). */
#define CHUNKD_SQLITE_LIMIT_LENGTH 0

/* Storage classes (https://sqlite.org/c3ref/c_blob.html). */
#define CHUNKD_SQLITE_INTEGER 1
#define CHUNKD_SQLITE_FLOAT 2
#define CHUNKD_SQLITE_TEXT 3
#define CHUNKD_SQLITE_BLOB 4
#define CHUNKD_SQLITE_NULL 5

/* The authorizer's record of a connection's last prepare: the first
 * action it denied (0: none) and what it named, and whether the
 * statement calls a function whose result is not a function of the
 * database alone (random(), the date and time functions, ...). */
typedef struct chunkd_q_auth {
	int denied;
	char what[200];
	int nondeterministic;
} chunkd_q_auth;

/* One column's value of the current row: its storage class and its
 * value (p and n for TEXT and BLOB, SQLite's memory until the next step). */
typedef struct chunkd_q_col {
	int type;
	int n;
	sqlite3_int64 i;
	double f;
	const void *p;
} chunkd_q_col;

/* chunkd_q_open opens uri read-only (a URI filename), locked down for
 * untrusted statements (see conn.c), with au as its authorizer's record. */
int chunkd_q_open(const char *uri, sqlite3 **db, chunkd_q_auth *au);

/* chunkd_q_step steps s and, on a row, fills cols[0..ncol). */
int chunkd_q_step(sqlite3_stmt *s, int ncol, chunkd_q_col *cols);

/* chunkd_q_bind_text and chunkd_q_bind_blob bind a copy of p[0..n). */
int chunkd_q_bind_text(sqlite3_stmt *s, int i, const char *p, int n);
int chunkd_q_bind_blob(sqlite3_stmt *s, int i, const void *p, int n);

#endif
