//go:build cgo && !chunkd_ext

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sqlite.h"

/* More of SQLite's interface, used only here. */
int sqlite3_db_config(sqlite3 *, int op, ...);
int sqlite3_step(sqlite3_stmt *);
int sqlite3_column_type(sqlite3_stmt *, int);
sqlite3_int64 sqlite3_column_int64(sqlite3_stmt *, int);
double sqlite3_column_double(sqlite3_stmt *, int);
const unsigned char *sqlite3_column_text(sqlite3_stmt *, int);
const void *sqlite3_column_blob(sqlite3_stmt *, int);
int sqlite3_column_bytes(sqlite3_stmt *, int);
int sqlite3_bind_text(sqlite3_stmt *, int, const char *, int, void (*)(void *));
int sqlite3_bind_blob(sqlite3_stmt *, int, const void *, int, void (*)(void *));

#define SQLITE_OPEN_READONLY 0x00000001
#define SQLITE_OPEN_URI 0x00000040
#define SQLITE_OPEN_FULLMUTEX 0x00010000
#define SQLITE_OPEN_EXRESCODE 0x02000000
#define SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER 1004
#define SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION 1005
#define SQLITE_DBCONFIG_DEFENSIVE 1010
#define SQLITE_DBCONFIG_WRITABLE_SCHEMA 1011
#define SQLITE_LIMIT_ATTACHED 7
#define SQLITE_TRANSIENT ((void (*)(void *)) - 1)

/* Authorizer actions (https://sqlite.org/c3ref/c_alter_table.html) and
 * answers. */
#define SQLITE_PRAGMA 19
#define SQLITE_READ 20
#define SQLITE_SELECT 21
#define SQLITE_FUNCTION 31
#define SQLITE_RECURSIVE 33
#define SQLITE_AUTH_OK 0
#define SQLITE_DENY 1

static int oneOf(const char *s, const char *const *list) {
	for (; *list; list++) {
		if (strcasecmp(s, *list) == 0) {
			return 1;
		}
	}
	return 0;
}

/* Pragmas that only read, whatever their argument (a table's or an
 * index's name, a row limit): they are what a reader asks of a schema. */
static const char *const readPragmas[] = {
	"table_info", "table_xinfo", "table_list", "index_info", "index_xinfo",
	"index_list", "foreign_key_list", "foreign_key_check", "integrity_check",
	"quick_check", 0,
};

/* Pragmas that read without an argument and set something with one:
 * allowed only without. */
static const char *const settingPragmas[] = {
	"application_id", "auto_vacuum", "cache_size", "collation_list",
	"compile_options", "data_version", "database_list", "encoding",
	"foreign_keys", "freelist_count", "function_list", "journal_mode",
	"max_page_count", "module_list", "page_count", "page_size",
	"pragma_list", "schema_version", "user_version", 0,
};

/* Functions whose result is not a function of the database and the
 * statement alone: a statement that calls one is not cached. (The date
 * and time functions are listed whatever their arguments: 'now' is one.) */
static const char *const nondeterministic[] = {
	"random", "randomblob", "date", "time", "datetime", "julianday",
	"unixepoch", "strftime", "timediff", "current_date", "current_time",
	"current_timestamp", "changes", "total_changes", "last_insert_rowid", 0,
};

/* authorize lets a statement read and nothing else: SELECT, reading
 * columns, recursive common table expressions, functions but
 * load_extension, and the pragmas above. Everything else (every write,
 * ATTACH and DETACH, transactions, savepoints, temporary objects,
 * ANALYZE, any other pragma) is denied, and the denial recorded. */
static int authorize(void *arg, int action, const char *a, const char *b, const char *db, const char *trigger) {
	chunkd_q_auth *au = arg;
	(void)db;
	(void)trigger;
	switch (action) {
	case SQLITE_SELECT:
	case SQLITE_READ:
	case SQLITE_RECURSIVE:
		return SQLITE_AUTH_OK;
	case SQLITE_FUNCTION:
		if (b && strcasecmp(b, "load_extension") == 0) {
			break;
		}
		if (b && oneOf(b, nondeterministic)) {
			au->nondeterministic = 1;
		}
		return SQLITE_AUTH_OK;
	case SQLITE_PRAGMA:
		if (a && (oneOf(a, readPragmas) || (b == 0 && oneOf(a, settingPragmas)))) {
			return SQLITE_AUTH_OK;
		}
		break;
	}
	/* The last refusal is kept: the statement's own action comes after
	 * SQLite's checks of what it would write to the schema table. */
	{
		au->denied = action;
		au->what[0] = 0;
		if (a) {
			strncat(au->what, a, 90);
		}
		if (b) {
			strcat(au->what, "\x1f");
			strncat(au->what, b, 90);
		}
	}
	return SQLITE_DENY;
}

int chunkd_q_open(const char *uri, sqlite3 **db, chunkd_q_auth *au) {
	int rc = sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_EXRESCODE, 0);
	if (rc != CHUNKD_SQLITE_OK) {
		return rc;
	}
	sqlite3_extended_result_codes(*db, 1);
	sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
	sqlite3_db_config(*db, SQLITE_DBCONFIG_WRITABLE_SCHEMA, 0, (int *)0);
	sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)0);
	sqlite3_db_config(*db, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, (int *)0);
	sqlite3_limit(*db, SQLITE_LIMIT_ATTACHED, 0);
	return sqlite3_set_authorizer(*db, authorize, au);
}

int chunkd_q_step(sqlite3_stmt *s, int ncol, chunkd_q_col *cols) {
	int rc = sqlite3_step(s);
	if (rc != CHUNKD_SQLITE_ROW) {
		return rc;
	}
	for (int i = 0; i < ncol; i++) {
		chunkd_q_col *c = &cols[i];
		c->type = sqlite3_column_type(s, i);
		c->n = 0;
		c->p = 0;
		switch (c->type) {
		case CHUNKD_SQLITE_INTEGER:
			c->i = sqlite3_column_int64(s, i);
			break;
		case CHUNKD_SQLITE_FLOAT:
			c->f = sqlite3_column_double(s, i);
			break;
		case CHUNKD_SQLITE_TEXT:
			c->p = sqlite3_column_text(s, i);
			c->n = sqlite3_column_bytes(s, i);
			break;
		case CHUNKD_SQLITE_BLOB:
			c->p = sqlite3_column_blob(s, i);
			c->n = sqlite3_column_bytes(s, i);
			break;
		}
	}
	return rc;
}

int chunkd_q_bind_text(sqlite3_stmt *s, int i, const char *p, int n) {
	return sqlite3_bind_text(s, i, n ? p : "", n, SQLITE_TRANSIENT);
}

int chunkd_q_bind_blob(sqlite3_stmt *s, int i, const void *p, int n) {
	return sqlite3_bind_blob(s, i, n ? p : "", n, SQLITE_TRANSIENT);
}
