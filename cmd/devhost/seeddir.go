package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// emulatorShorthand is the connection string that means "the storage emulator on its default
// ports".
const emulatorShorthand = "UseDevelopmentStorage=true"

// toStartedAzurite points the app at the Azurite the devhost started: AzureWebJobsStorage, and
// every other setting the settings file gives the emulator shorthand (an app's own storage
// setting, such as a job's input account), since this Azurite listens on free ports, not the
// default ones. Settings already in set (flags) are left as they are.
func toStartedAzurite(appRoot, settingsFile, conn string, set map[string]string) error {
	s, err := devhost.LoadSettings(appRoot, settingsFile, os.Environ(), nil)
	if err != nil {
		return err
	}
	for k, v := range s.Map() {
		if _, given := set[k]; !given && strings.EqualFold(strings.TrimSpace(v), emulatorShorthand) {
			set[k] = conn
		}
	}
	set[config.SettingHostStorage] = conn
	return nil
}

// seedDirs collects repeated -seed CONTAINER=DIR.
type seedDirs map[string]string

func (s seedDirs) String() string { return fmt.Sprint(map[string]string(s)) }
func (s seedDirs) Set(v string) error {
	c, dir, ok := strings.Cut(v, "=")
	if !ok || c == "" || dir == "" {
		return errors.New("want CONTAINER=DIR")
	}
	s[c] = dir
	return nil
}

// uploadDirs creates each container and uploads every file under its folder, named by its
// slash-separated path relative to the folder. It returns how many files it uploaded.
func uploadDirs(ctx context.Context, client *azblob.Client, dirs seedDirs) (int, error) {
	n := 0
	for container, dir := range dirs {
		if _, err := client.CreateContainer(ctx, container, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return n, fmt.Errorf("seed %s: %w", container, err)
		}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := client.UploadBuffer(ctx, container, filepath.ToSlash(rel), b, nil); err != nil {
				return fmt.Errorf("upload %s: %w", path, err)
			}
			n++
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("seed %s from %s: %w", container, dir, err)
		}
	}
	return n, nil
}
