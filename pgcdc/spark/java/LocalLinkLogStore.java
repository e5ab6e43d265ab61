// A Delta log store for tables on a local (POSIX) file system whose put-if-absent holds across
// processes: a commit file is written whole under a temporary name, then published with link(2),
// which fails if the version exists, atomically. Delta's LocalLogStore checks and renames under a
// lock of its own JVM only, and a rename replaces an existing file: two applications committing
// the same version (pgcdc and an OPTIMIZE elsewhere) could each think they won.
// Its listing reads only the names of the log folder and the status of the files from the
// asked-for version on: Hadoop's listStatus (Delta's default here) makes a FileStatus, with its
// system calls, for every file of a folder that grows by two files a commit until Delta's log
// cleanup (30 days by default), and Delta lists it on every snapshot update, before and after
// each commit (docs/performance.md, "Continuous sync").
// Built by pgcdc.spark.logstore (javac) on first use; see docs/operations.md, "Other writers".
package io.pgcdc.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Writer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class LocalLinkLogStore extends HadoopFileSystemLogStore {

    public LocalLinkLogStore(Configuration conf) {
        super(conf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        java.nio.file.Path target = Paths.get(path.getFileSystem(hadoopConf).makeQualified(path).toUri());
        Files.createDirectories(target.getParent());
        java.nio.file.Path temp = target.resolveSibling(
                "." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        try {
            try (FileChannel channel = FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                Writer writer = Channels.newWriter(channel, StandardCharsets.UTF_8);
                while (actions.hasNext()) {
                    writer.write(actions.next());
                    writer.write("\n");
                }
                writer.flush();
                channel.force(true);
            }
            if (overwrite) {
                Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } else {
                Files.createLink(target, temp);  // java.nio.file.FileAlreadyExistsException: Delta retries
            }
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    // Delta's contract: the files of path's folder whose names sort at or after path's name,
    // sorted by name; FileNotFoundException if the folder does not exist.
    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Path parent = fs.makeQualified(path).getParent();
        java.nio.file.Path folder = Paths.get(parent.toUri());
        String start = path.getName();
        TreeMap<String, BasicFileAttributes> found = new TreeMap<>();
        try (DirectoryStream<java.nio.file.Path> names = Files.newDirectoryStream(folder)) {
            for (java.nio.file.Path entry : names) {
                String name = entry.getFileName().toString();
                if (name.compareTo(start) >= 0) {
                    try {
                        found.put(name, Files.readAttributes(entry, BasicFileAttributes.class));
                    } catch (NoSuchFileException gone) {
                        // removed since the folder was read (log cleanup, a temporary file): not listed
                    }
                }
            }
        } catch (NoSuchFileException missing) {
            throw new FileNotFoundException("No such file or directory: " + parent);
        }
        List<FileStatus> listed = new ArrayList<>(found.size());
        long blockSize = fs.getDefaultBlockSize(parent);
        for (var e : found.entrySet()) {
            BasicFileAttributes a = e.getValue();
            listed.add(new FileStatus(a.size(), a.isDirectory(), 1, blockSize, a.lastModifiedTime().toMillis(),
                    new Path(parent, e.getKey())));
        }
        return listed.iterator();
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}
