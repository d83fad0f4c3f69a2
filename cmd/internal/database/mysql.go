package database

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemmysql"
)

// MySQLDSN turns mysql://user:password@host:port/database?params into
// the driver's DSN (user:password@tcp(host:port)/database?params): the
// query parameters are the driver's (github.com/go-sql-driver/mysql),
// such as tls=true or timeout=5s. The port defaults to 3306. Its errors
// never repeat the URL, which may hold a password.
func MySQLDSN(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "mysql" {
		return "", errors.New("database: a MySQL URL is mysql://user:password@host:port/database?params")
	}
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	host := u.Host
	if host == "" {
		return "", errors.New("database: the MySQL URL names no host")
	}
	if u.Port() == "" {
		host = net.JoinHostPort(strings.Trim(u.Hostname(), "[]"), "3306")
	}
	cfg.Net, cfg.Addr = "tcp", host
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return "", errors.New("database: the MySQL URL names no database (mysql://user:password@host:port/database)")
	}
	dsn := cfg.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		msg := err.Error()
		if cfg.Passwd != "" {
			msg = strings.ReplaceAll(msg, cfg.Passwd, "****")
		}
		return "", fmt.Errorf("database: the MySQL URL's parameters: %s", msg)
	}
	return dsn, nil
}

func openMySQL(ctx context.Context, rawURL string, c Config) (*DB, error) {
	dsn, err := MySQLDSN(rawURL)
	if err != nil {
		return nil, err
	}
	store, err := idemmysql.Open(ctx, dsn, &idemmysql.Config{Logger: c.Logger, MaxOpenConns: PoolConnsDefault * 4})
	if err != nil {
		return nil, err
	}
	mc, _ := mysql.ParseDSN(dsn)
	return &DB{Name: fmt.Sprintf("mysql://%s/%s", mc.Addr, mc.DBName), MySQL: store}, nil
}
