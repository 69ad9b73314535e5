package hack

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepositoryStandsAlone: no file cites a document outside the
// repository (the notes it was written from), and every docs/ page a file
// cites exists.
func TestRepositoryStandsAlone(t *testing.T) {
	outside := regexp.MustCompile(`shared` + `/(docs|kernel-vm|seeds)|field` + `-notes\.md|seeds` + `/0`)
	cited := regexp.MustCompile(`docs/[a-z0-9-]+\.md`)
	skip := map[string]bool{".git": true, ".cache": true, "out": true, "bin": true}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".json", ".yaml", ".sh", "":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			require.False(t, outside.MatchString(line), "%s:%d cites a file outside the repository: %s", p, i+1, line)
			for _, c := range cited.FindAllString(line, -1) {
				_, err := os.Stat(filepath.Join("..", c))
				require.NoError(t, err, "%s:%d cites %s", p, i+1, c)
			}
		}
		return nil
	})
	require.NoError(t, err)
}
