// Command pgqrelease is the release machinery behind scripts/release.sh,
// scripts/gen-upgrade.sh and scripts/verify-sql.sh (docs/releases.md):
//
//	pgqrelease gen-upgrade   write the upgrade migration from the last release to the working tree
//	pgqrelease signatures    write sql/signatures.txt from a fresh install of the working tree
//	pgqrelease check         the pending upgrade migration is current; catalog diff of a fresh
//	                         install against every release in RELEASES upgraded to the working tree
//	pgqrelease catalog       print the catalog of the database at DATABASE_URL
//
// Each needs DATABASE_URL: a server where it may create temporary databases
// (catalog: the database to print). It runs from the repository root.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/pgfanout/pgq/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pgqrelease: "+err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New("usage: pgqrelease gen-upgrade|signatures|check|catalog (DATABASE_URL set)")
	}
	db := os.Getenv("DATABASE_URL")
	if db == "" {
		return errors.New("DATABASE_URL is not set")
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	tmp := os.TempDir()
	logf := func(s string) { fmt.Println("pgqrelease: " + s) }
	switch args[0] {
	case "gen-upgrade":
		up, err := release.GenerateUpgrade(ctx, db, root, tmp)
		if err != nil {
			return err
		}
		if err := up.Write(root); err != nil {
			return err
		}
		if up.Number == 0 {
			logf(fmt.Sprintf("nothing changed since release %s: no upgrade migration", up.From.Version))
			return nil
		}
		logf(fmt.Sprintf("migration %03d: upgrade from %s: %d code files, %d signatures dropped",
			up.Number, up.From.Version, len(up.Changed), len(up.Dropped)))
		for _, d := range up.Dropped {
			logf("  drops: " + d)
		}
		return nil
	case "signatures":
		sigs, err := release.FreshSignatures(ctx, db, root)
		if err != nil {
			return err
		}
		return os.WriteFile(release.SignaturesFile, []byte(strings.Join(sigs, "\n")+"\n"), 0o644)
	case "check":
		var problems []string
		rels, err := release.ReadReleases(root)
		if err != nil {
			return err
		}
		if len(rels) > 0 {
			up, err := release.GenerateUpgrade(ctx, db, root, tmp)
			if err != nil {
				return err
			}
			for _, p := range up.Check(root) {
				problems = append(problems, p+" (run scripts/gen-upgrade.sh)")
			}
			if len(problems) == 0 {
				logf(fmt.Sprintf("the upgrade migration from %s is current", up.From.Version))
			}
		}
		more, err := release.CheckCatalog(ctx, db, root, tmp, logf)
		if err != nil {
			return err
		}
		problems = append(problems, more...)
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "pgqrelease: "+p)
		}
		if len(problems) > 0 {
			return fmt.Errorf("check: %d problem(s)", len(problems))
		}
		return nil
	case "catalog":
		c, err := release.Catalog(ctx, db)
		if err != nil {
			return err
		}
		fmt.Print(c)
		return nil
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}
