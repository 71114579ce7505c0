//go:build !linux

package main

import "errors"

func eventfd() (int, error) { return -1, errors.New("no eventfd") }
