package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// licenceFiles are the names `go mod vendor` copies from a module's root.
var licenceFiles = []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING", "LICENCE"}

// The licences rdmad's modules use, told apart by the sentences that make
// each one: the Apache grant, MIT's permission notice, the BSD conditions
// (three with the no-endorsement clause, two without), MPL-2.0 and ISC.
var licenceKinds = []struct {
	id    string
	marks []*regexp.Regexp
}{
	{"Apache-2.0", []*regexp.Regexp{regexp.MustCompile(`Apache License\s+Version 2\.0`)}},
	{"MPL-2.0", []*regexp.Regexp{regexp.MustCompile(`Mozilla Public License,?\s+(v\.|version)\s*2\.0`)}},
	{"MIT", []*regexp.Regexp{regexp.MustCompile(`Permission is hereby granted, free of charge, to any person obtaining`)}},
	{"ISC", []*regexp.Regexp{regexp.MustCompile(`Permission to use, copy, modify, and(/or)? distribute this software for any`)}},
	{"BSD-3-Clause", []*regexp.Regexp{
		regexp.MustCompile(`Redistribution and use in source and binary forms`),
		regexp.MustCompile(`(?i)(Neither the name|names of its\s+contributors|name of the copyright holder)`)}},
	{"BSD-2-Clause", []*regexp.Regexp{regexp.MustCompile(`Redistribution and use in source and binary forms`)}},
}

// ModuleLicense names the SPDX licence of the module vendored in dir, from
// its licence file. A module without one, or with a text none of the known
// licences matches, is an error: the tarball must not ship code whose
// licence nobody checked.
func ModuleLicense(dir string) (string, error) {
	for _, name := range licenceFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		text := strings.Join(strings.Fields(string(data)), " ")
		for _, k := range licenceKinds {
			all := true
			for _, m := range k.marks {
				all = all && m.MatchString(text)
			}
			if all {
				return k.id, nil
			}
		}
		return "", fmt.Errorf("%s: a licence this tool does not know; name it in packaging/sbom/license.go and packaging/copyright", name)
	}
	return "", fmt.Errorf("no licence file (%s) in %s", strings.Join(licenceFiles, ", "), dir)
}
