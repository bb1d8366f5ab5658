module github.com/xroce/xroce/internal/modproxy

go 1.25.0

require golang.org/x/mod v0.29.0
