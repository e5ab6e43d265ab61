// A Delta log store for tables on a local (POSIX) file system whose put-if-absent holds across
// processes: a commit file is written whole under a temporary name, then published with link(2),
// which fails if the version exists, atomically. Delta's LocalLogStore checks and renames under a
// lock of its own JVM only, and a rename replaces an existing file: two applications committing
// the same version (pgcdc and an OPTIMIZE elsewhere) could each think they won.
// Built by pgcdc.logstore (javac) on first use; see docs/operations.md, "Other writers".
package io.pgcdc.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.Writer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
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

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}
